"""schedkit-lcf: preempt the running request that has computed the least.

vLLM preempts by recompute: the victim's KV blocks are freed and everything it computed
(prompt and output so far) is computed again when it is readmitted. vLLM's default victim
is the last admitted request, whatever it has computed; vLLM RFC #54644 measured 10-23%
of tokens recomputed online and proposed least-computed-first (LCF), which throws away
the least work per preemption. The entry point ``lcf`` in group ``schedkit.policies``
names ``LeastComputedFirst``.
"""

from __future__ import annotations

from collections.abc import Sequence

import schedkit
from schedkit import EngineView, RequestView, hookimpl

__all__ = ["LeastComputedFirst"]


class LeastComputedFirst(schedkit.Policy):
    """Victims in order of ``num_computed_tokens``, fewest first; ties go to the newest
    (the last admitted, as vLLM's default would choose).

    ``needing`` is a candidate like any other: when it has computed the least, preempting
    it wastes the least, and the engine then skips it this step.
    """

    class Options(schedkit.PolicyOptions):
        pass

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        # Engine order is admission order: a larger index is a newer request.
        ranked = sorted(
            enumerate(running), key=lambda item: (item[1].num_computed_tokens, -item[0])
        )
        return [request for _, request in ranked]
