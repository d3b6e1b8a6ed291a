"""Built-in policies with vLLM's semantics, so results match the engines users run."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from schedkit._markers import hookimpl
from schedkit.policy import Policy, PolicyOptions
from schedkit.views import EngineView, ReplicaView, RequestView


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


class RoundRobin(Policy):
    """Route requests to the replicas in turn (a cluster's default; ``route_request``)."""

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self._next = 0

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        index = self._next % len(replicas)
        self._next = index + 1
        return index


def load(replica: ReplicaView) -> tuple[int, int, int]:
    """Lower is less loaded: running plus waiting requests, then fewer free KV blocks
    (negated), then the index."""
    engine = replica.engine
    return (engine.num_running + engine.num_waiting, -engine.kv_blocks_free, replica.index)


class LeastLoaded(Policy):
    """Route each request to the replica with the fewest running plus waiting requests,
    then the most free KV blocks, then the lowest index."""

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        return min(replicas, key=load).index


class PowerOfTwo(Policy):
    """Ray Serve's default router (``PowerOfTwoChoicesRequestRouter``): pick two replicas at
    random and route to the one with fewer running plus waiting requests (the first
    picked on a tie). Seeded, so a simulation repeats (``seed``)."""

    class Options(PolicyOptions):
        seed: int = Field(default=0, ge=0)

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self._rng = random.Random(self.options.seed)  # type: ignore[attr-defined]

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        if len(replicas) == 1:
            return replicas[0].index
        first, second = self._rng.sample(range(len(replicas)), 2)
        a, b = replicas[first], replicas[second]
        queued = [r.engine.num_running + r.engine.num_waiting for r in (a, b)]
        return b.index if queued[1] < queued[0] else a.index
