"""schedkit-priority-aging: priority scheduling in which waiting earns priority.

vLLM's ``--scheduling-policy priority`` serves the lowest priority value first, forever:
under sustained high-priority load a low-priority request can wait without bound (the
starvation complaint of vLLM PR #20608). Here a request's *effective* priority improves
linearly with the time since it arrived::

    effective = priority - aging_rate * (clock - arrival_time)

so a request of priority ``p + d`` overtakes a fresh request of priority ``p`` after
``d / aging_rate`` seconds. The entry point ``priority-aging`` in group
``schedkit.policies`` names ``PriorityAging``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import schedkit
from pydantic import Field
from schedkit import EngineView, RequestView, hookimpl

__all__ = ["PriorityAging", "effective_priority"]


def effective_priority(request: RequestView, clock: float, aging_rate: float) -> float:
    """The request's priority less ``aging_rate`` levels per second since it arrived."""
    return request.priority - aging_rate * (clock - request.arrival_time)


class PriorityAging(schedkit.Policy):
    """Lowest effective priority first, earlier arrival breaking ties; the preemption
    victim is the worst effective priority, then the newest.

    With the same ``clock`` for every request, ordering by ``effective_priority`` is
    ordering by ``priority + aging_rate * arrival_time``: the key below, which does not
    move with the clock, so two steps never disagree through rounding.
    """

    class Options(schedkit.PolicyOptions):
        aging_rate: float = Field(
            default=0.1,
            gt=0,
            le=1000,
            description=(
                "Priority levels a request gains per second of waiting (engine clock minus"
                " arrival): a request 1 level worse overtakes a fresh one after"
                " 1 / aging_rate seconds."
            ),
        )

    options: Options

    def _key(self) -> Callable[[RequestView], tuple[float, float]]:
        rate = self.options.aging_rate

        def key(request: RequestView) -> tuple[float, float]:
            return (request.priority + rate * request.arrival_time, request.arrival_time)

        return key

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=self._key())

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        # Exact ties go to the last admitted, as FCFS would: a request that needs blocks
        # must not preempt an older equal, or two equals could preempt each other forever.
        return sorted(reversed(running), key=self._key(), reverse=True)
