"""Built-in policies with vLLM's semantics, so results match the engines users run."""

from __future__ import annotations

from schedkit._markers import hookimpl
from schedkit.policy import Policy
from schedkit.views import EngineView, RequestView


class FCFS(Policy):
    """First come, first served: the engine default (vLLM's ``--scheduling-policy fcfs``).

    Implements no hook, so it costs nothing: every engine schedules FCFS by default
    (arrival order, preempted requests back at the front, the last admitted running
    request is the preemption victim).
    """


class PriorityPolicy(Policy):
    """vLLM's ``--scheduling-policy priority``: lower value first, earlier arrival breaks
    ties; the preemption victim is the worst priority, then the newest. Keys: the engine
    keeps the order (one call per request joining the queue, none per step)."""

    @hookimpl
    def waiting_key(self, request: RequestView, engine: EngineView) -> tuple[int, float]:
        return (request.priority, request.arrival_time)

    @hookimpl
    def victim_key(self, request: RequestView, engine: EngineView) -> tuple[int, float]:
        # Lower is preempted first: the worst priority, then the newest. Ties go to the
        # last admitted, as FCFS would: the request that needs blocks must not preempt an
        # older equal, or two equals can take turns preempting each other forever.
        return (-request.priority, -request.arrival_time)
