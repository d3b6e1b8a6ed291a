"""A cluster of simulated replicas behind a router (``route_request``).

Each replica is a :class:`SimEngine` with its own KV cache, clock and instance of the
policies. Requests are routed one by one in arrival order: first every replica runs the
steps that start before the arrival (``SimEngine.advance``), then the router sees each
replica as of its last finished step and chooses one, and that replica receives the
request (``SimEngine.deliver``). With one replica the run is the single engine's, step
for step (``tests/sim/test_cluster.py``).

A caller that watches the run as it goes (a plan's probe stops once its verdict is
decided) routes the requests in batches (``Cluster.route``) and reads each request's
record and replica between them; ``Cluster.run`` routes what is left and finishes.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence

from schedkit.facade import PolicyFacade, by_hook
from schedkit.records import RequestRecord, RunResult, TimelinePoint
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.sim.request import SimRequest, TraceLike
from schedkit.sim.view import SimEngineView
from schedkit.views import EngineView, RequestView

__all__ = ["Cluster", "SimReplicaView"]


class SimReplicaView:
    """What the router sees of one replica (``schedkit.views.ReplicaView``): read-only."""

    __slots__ = ("_engine", "_index", "_role")

    def __init__(self, index: int, engine: SimEngine, role: str = "both") -> None:
        self._index = index
        self._engine = engine
        self._role = role

    @property
    def index(self) -> int:
        return self._index

    @property
    def role(self) -> str:
        return self._role

    @property
    def engine(self) -> EngineView:
        return RoutedView(self._engine)

    def cached_tokens(self, request: RequestView) -> int:
        if not isinstance(request, SimRequest):
            return 0
        engine = self._engine
        shared, own, _ = engine.kv.lookup(request.blocks, request.record.prompt_tokens)
        return (shared + own) * engine.cfg.block_size

    def __setattr__(self, name: str, value: object) -> None:
        if name in self.__slots__ and not hasattr(self, name):
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"ReplicaView is read-only; {name!r} cannot be set")

    def __repr__(self) -> str:
        e = self._engine
        return f"ReplicaView({self._index}, running={len(e.running)}, waiting={len(e.waiting)})"


class RoutedView(SimEngineView):
    """A replica's engine as its router sees it: ``num_waiting`` also counts requests
    routed to it that it has not admitted yet (it is mid-step), as a router counts what
    it sent; otherwise a burst would all go to the replica that looked idle."""

    __slots__ = ()
    _engine: SimEngine

    @property
    def num_waiting(self) -> int:
        engine = self._engine
        return len(engine.waiting) + len(engine.pending) - engine.arrived


class Cluster:
    """``replicas`` copies of the simulated engine behind ``router``'s ``route_request``
    (round-robin where it has no answer); ``facades`` holds one policy instance per
    replica."""

    def __init__(
        self,
        requests: Iterable[TraceLike],
        cost: StepCost,
        config: SimConfig,
        facades: Sequence[PolicyFacade],
        router: PolicyFacade,
        *,
        stretch: bool = True,
    ) -> None:
        self.cfg = config
        self.requests = sorted(requests, key=lambda r: r.arrival_s)  # stable: trace order
        self.replicas = [SimEngine([], cost, config, f, stretch=stretch) for f in facades]
        self.views = [SimReplicaView(i, e) for i, e in enumerate(self.replicas)]
        self.router = router
        self.routed = [0] * len(self.replicas)
        self.records: list[RequestRecord] = []  # the requests routed so far, in order
        self.placement: list[int] = []  # the replica each of them went to
        self._turn = 0
        self._started: float | None = None

    def run(self) -> RunResult:
        """Route every request not routed yet, run each replica to its end, and merge
        their results."""
        with no_cyclic_gc():
            self.route(len(self.requests))
            for engine in self.replicas:
                engine.advance(math.inf)
            assert self._started is not None
            return merge(
                [e.finish(self._started) for e in self.replicas],
                self.records,
                self.router,
                self.routed,
                self.cfg,
                self._started,
            )

    def refreshed(self, index: int) -> RequestRecord:
        """Request ``index``'s record as of now (a caller watching the run)."""
        return self.records[index]

    def first_token_floor(self, index: int) -> float:
        """No first token of request ``index`` still to come can come before this: its
        replica's clock (the end of the step it is in)."""
        return self.replicas[self.placement[index]].clock

    def route(self, upto: int) -> None:
        """Route the requests before index ``upto`` (in arrival order) not routed yet:
        for each, every replica first runs the steps that start before its arrival."""
        if self._started is None:
            self._started = time.perf_counter()
        with no_cyclic_gc():
            self._route(len(self.records), min(upto, len(self.requests)))

    def _route(self, first: int, upto: int) -> None:
        cfg, replicas, views, router = self.cfg, self.replicas, self.views, self.router
        advances = [engine.advance for engine in replicas]
        records, placement, routed = self.records, self.placement, self.routed
        block_size, hash_tokens = cfg.block_size, cfg.hash_block_tokens
        routing = router.has_route  # else round-robin, without building the call
        for index in range(first, upto):
            trace = self.requests[index]
            arrival = trace.arrival_s
            for advance in advances:
                advance(arrival)
            request = SimRequest.from_trace(index, trace, block_size, hash_tokens)
            chosen = router.route(request, views) if routing else None
            if chosen is None:
                chosen = self._turn
                self._turn = (chosen + 1) % len(replicas)
            routed[chosen] += 1
            replicas[chosen].deliver_request(request)
            records.append(request.record)
            placement.append(chosen)


def merge(
    results: Sequence[RunResult],
    records: list[RequestRecord],
    router: PolicyFacade,
    routed: list[int],
    cfg: SimConfig,
    started: float,
) -> RunResult:
    """The replicas' results as one run: every request in arrival order, counters summed,
    the timeline summed per sampling interval, the router's faults counted too."""
    errors: Counter[str] = Counter(by_hook(router.errors))
    slow: Counter[str] = Counter(by_hook(router.slow_calls))
    rejections: Counter[str] = Counter()
    gaps: Counter[float] = Counter()
    for r in results:
        errors.update(r.policy_errors_by_hook)
        slow.update(r.slow_hook_calls)
        rejections.update(r.rejections)
        gaps.update(dict(r.itl))
    duration = max(r.duration_s for r in results)
    return RunResult(
        policy=results[0].policy,
        records=records,
        duration_s=duration,
        steps=sum(r.steps for r in results),
        preemptions=sum(r.preemptions for r in results),
        recomputed_tokens=sum(r.recomputed_tokens for r in results),
        prefix_query_tokens=sum(r.prefix_query_tokens for r in results),
        prefix_hit_tokens=sum(r.prefix_hit_tokens for r in results),
        host_hit_tokens=sum(r.host_hit_tokens for r in results),
        policy_errors=sum(r.policy_errors for r in results) + router.error_count,
        policy_errors_by_hook=dict(errors),
        slow_hook_calls=dict(slow),
        rejections=dict(rejections),
        itl=sorted(gaps.items()),
        timeline=_timeline(results, cfg.timeline_interval_s),
        kv_usage_mean=(
            sum(r.kv_usage_mean * r.duration_s for r in results) / (duration * len(results))
            if duration > 0
            else 0.0
        ),
        wall_s=time.perf_counter() - started,
        routed=list(routed),
    )


def _timeline(results: Sequence[RunResult], interval: float) -> list[TimelinePoint]:
    """Per sampling interval, each replica's last sample: waiting and running summed,
    KV usage averaged over the replicas (an idle one counts as it last was)."""
    last: list[TimelinePoint | None] = [None] * len(results)
    buckets: dict[int, dict[int, TimelinePoint]] = {}
    for i, r in enumerate(results):
        for point in r.timeline:
            buckets.setdefault(int(point.t // interval), {})[i] = point
    out = []
    for bucket in sorted(buckets):
        for i, point in buckets[bucket].items():
            last[i] = point
        seen = [p for p in last if p is not None]
        out.append(
            TimelinePoint(
                bucket * interval,
                sum(p.waiting for p in seen),
                sum(p.running for p in seen),
                sum(p.kv_usage for p in seen) / len(results),
            )
        )
    return out
