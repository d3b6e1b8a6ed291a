"""Built-in policies with vLLM's semantics, so results match the engines users run."""

from __future__ import annotations

from collections.abc import Sequence

from schedkit._markers import hookimpl
from schedkit.policy import Policy
from schedkit.views import EngineView, RequestView


class FCFS(Policy):
    """First come, first served: the engine default (vLLM's ``--scheduling-policy fcfs``).

    Implements no hook, so it costs nothing: every engine schedules FCFS by default
    (arrival order, preempted requests back at the front, the last admitted running
    request is the preemption victim).
    """


def _priority_key(request: RequestView) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


class PriorityPolicy(Policy):
    """vLLM's ``--scheduling-policy priority``: lower value first, earlier arrival breaks
    ties; the preemption victim is the worst priority, then the newest."""

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=_priority_key)

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        # Ties on (priority, arrival) go to the last admitted, as FCFS would: the request
        # that needs blocks must not preempt an older equal, or two equals can take turns
        # preempting each other forever.
        return sorted(reversed(running), key=_priority_key, reverse=True)
