"""vLLM's prefill cadence and cache-aware admission in the simulated engine.

``prefill_schedule_interval`` (vLLM 0.33+, ``Scheduler.local_prefill_interval``): prefill
is admitted only once ``N`` executed steps have passed since the last step that carried
prefill; the steps between decode alone, and a held step runs no chunk of an admitted
prompt either. Two escapes, as vLLM's: no step is held while no running request is
decoding, nor while the last release step left requests waiting (it was
"capacity-bound"), so a backed-up engine is never throttled.

``cache_aware_admission_window`` (vLLM 0.34, ``_reorder_waiting_by_cached_prefix``): once
the KV cache is at least ``cache_aware_admission_threshold`` used, the first ``N``
waiting requests that are neither preempted nor partly computed are reordered by their
prompt's prefix-cache hit, deepest first (arrival order between equals), on a step that
admits prefill. vLLM applies it to its FCFS queue; a schedkit policy that orders the
waiting queue owns that order, so the window is off under one (the adapter does the same).

Both follow vLLM 0.34's ``v1/core/sched/scheduler.py``; the twin tests on the 0.34 wheel
check the simulator makes the same decisions.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from schedkit.sim.request import SimRequest

if TYPE_CHECKING:
    from schedkit.facade import PolicyFacade
    from schedkit.sim.config import SimConfig
    from schedkit.sim.kv.cache import KVCache
    from schedkit.sim.waiting import FifoWaiting, KeyedWaiting

__all__ = ["PrefillCadence", "in_prefill"]


def in_prefill(req: SimRequest) -> bool:
    """Whether ``req`` has prompt tokens left (a decoding request has one new token, and
    has emitted output; a recomputed one re-prefills what it had): vLLM's
    ``Request.is_prefill_chunk`` after the step that last scheduled it."""
    num_new = req.num_tokens - req._num_computed_tokens
    return num_new > 1 or (num_new == 1 and not req._num_output_tokens)


class PrefillCadence:
    """The cadence's state and cache-aware admission, for :class:`SimEngine`."""

    if TYPE_CHECKING:
        cfg: SimConfig
        facade: PolicyFacade
        kv: KVCache
        running: list[SimRequest]
        waiting: FifoWaiting[SimRequest] | KeyedWaiting[SimRequest]

        def _any_decoding(self) -> bool: ...

    def _init_cadence(self) -> None:
        cfg = self.cfg
        self.prefill_interval = cfg.prefill_schedule_interval
        self.executed_steps = 0  # steps that scheduled any token
        self.last_prefill_step = -self.prefill_interval  # the first step is never held
        self.capacity_bound = False  # the last release left requests waiting
        self.cache_window = (
            cfg.cache_aware_admission_window
            if cfg.enable_prefix_caching and not self.facade.has_order
            else 0
        )

    def _defer_prefills(self) -> bool:
        """Whether this step holds prefill (``prefill_schedule_interval`` > 1 only)."""
        return (
            not self.capacity_bound
            and self.executed_steps + 1 - self.last_prefill_step < self.prefill_interval
            and self._any_decoding()
        )

    def _count_step(self, scheduled: bool, prefill: bool) -> None:
        """A step ends: count it if it scheduled anything; restart the interval from it if
        it carried prefill (a running request's chunk or an admission)."""
        if scheduled:
            self.executed_steps += 1
        if prefill:
            self.last_prefill_step = self.executed_steps

    def _count_decode_run(self, k: int) -> None:
        """``k`` alike decode steps ran at once (nothing waiting could be admitted): each
        counts, and one that was not held records whether requests are left waiting."""
        before = self.executed_steps
        self.executed_steps += k
        if self.capacity_bound or before + k - self.last_prefill_step >= self.prefill_interval:
            self.capacity_bound = bool(self.waiting)

    def _reorder_by_cached_prefix(self) -> None:
        """vLLM's ``_reorder_waiting_by_cached_prefix`` on the waiting queue's head."""
        waiting, kv = self.waiting, self.kv
        if (
            len(waiting) < 2
            or kv.num_used / kv.num_blocks < self.cfg.cache_aware_admission_threshold
        ):
            return
        head = list(itertools.islice(waiting, self.cache_window))
        slots = [i for i, r in enumerate(head) if not r._num_preemptions]
        if len(slots) < 2:
            return
        bs = self.cfg.block_size
        cached = {i: kv.lookup(head[i].blocks, head[i].num_tokens)[0] * bs for i in slots}
        order = sorted(slots, key=lambda i: (-cached[i], i))
        if order == slots:
            return
        reordered = list(head)
        for slot, source in zip(slots, order, strict=True):
            reordered[slot] = head[source]
        waiting.reorder([*reordered, *itertools.islice(waiting, len(head), None)])
