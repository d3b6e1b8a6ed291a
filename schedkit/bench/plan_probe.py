"""One probe of a plan's search: a candidate deployment at a replica count, replayed on
the simulator, and stopped as soon as its verdict is decided.

The search asks of a probe one thing: whether the share of requests meeting every SLO
reaches the target. That is decided before the replay ends once so many requests are
certain to miss that even if every other one met its SLOs, the share would stay below
the target. A request is certain to miss when it ended without meeting them (rejected,
or its TTFT or TPOT over target), or when its TTFT is already over target: its first
token came too late, or it has none yet and its replica's clock is past the deadline
(a first token comes at the end of a step still to run, so no earlier than that clock).
A request not yet decided counts as one that may still meet.

The requests are routed in batches (``Cluster.route``); between batches the undecided
ones are looked at again. A stopped probe reports how many requests had been routed and
the most its attainment could have been; a probe that runs to its end reports the same
figures as an unwatched replay, as the simulation is the same step for step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from schedkit.bench.disagg import Disaggregation, PoolSetup
from schedkit.bench.progress import per_replica, simulating
from schedkit.bench.stats.metrics import meets_slo
from schedkit.config import SchedkitConfig
from schedkit.facade import PolicyFacade
from schedkit.plugins import PolicyRegistry
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.cluster import Cluster
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.disagg import DisaggCluster, Pool
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.workload import TraceRequest

__all__ = ["Deployment", "Instant", "Sizes", "Stopped", "alone", "run_probe"]

CHECKS = 128  # looks at the undecided requests per replay, at most (evenly by arrivals)


@dataclass(frozen=True)
class Deployment:
    """What every probe of one candidate replays: the requests (rescaled, as trusted),
    the candidate's cost model and simulator config, the policies and the SLOs."""

    requests: Sequence[TraceRequest]
    cost: StepCost
    sim_config: SimConfig
    config: SchedkitConfig
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    registry: PolicyRegistry
    # a disaggregated candidate: its deployment, its pools' policies, and the prefill and
    # decode instances at each count the search probes (default: that many of each pool)
    disagg: Disaggregation | None = None
    pool_configs: tuple[SchedkitConfig | None, SchedkitConfig | None] = (None, None)
    sizes: Sizes | None = None


@dataclass(frozen=True)
class Sizes:
    """The prefill and decode instances a disaggregated search probes at count ``n``:
    ``phase`` alone, n of its instances (the other pool: one that takes no time,
    :func:`alone`); else ``start`` grown by one instance at a time, ``first`` first, then
    the other pool, in turn (n = 1: ``start`` itself)."""

    phase: str | None = None
    start: tuple[int, int] = (1, 1)
    first: str = "prefill"

    def __call__(self, n: int) -> tuple[int, int]:
        if self.phase == "prefill":
            return n, 1
        if self.phase == "decode":
            return 1, n
        grown, second = n - 1, (n - 1) // 2
        more = (grown - second, second) if self.first == "prefill" else (second, grown - second)
        return self.start[0] + more[0], self.start[1] + more[1]


class Instant:
    """A step cost of nothing: the other pool of a phase sized alone."""

    def step_time(self, prefill: int, decode: int, kv_tokens: int, attn_pairs: int) -> float:
        return 0.0

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        return 0.0

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        return k_max

    def describe(self) -> dict[str, object]:
        return {"kind": "instant"}


UNBOUNDED = 1 << 40  # blocks, sequences and tokens a step of a pool that takes no time has


def alone(d: Disaggregation, phase: str) -> Disaggregation:
    """``d`` with its pools but ``phase`` replaced by one instance that takes no time
    and never runs out of room: ``phase`` sized alone, as DistServe's placement search
    sizes each phase (a prefill's TTFT then lacks the decode instance's first step; a
    decode's TTFT, the prefill)."""
    other = "decode" if phase == "prefill" else "prefill"
    pool: PoolSetup = getattr(d, other)
    config = pool.config.model_copy(
        update={
            "num_blocks": UNBOUNDED,
            "max_num_seqs": UNBOUNDED,
            "max_num_batched_tokens": UNBOUNDED,
        }
    )
    free = dataclasses.replace(pool, replicas=1, cost=Instant(), config=config)  # type: ignore[arg-type]
    if other == "decode":
        return dataclasses.replace(d, decode=free)
    return dataclasses.replace(d, prefill=free)


@dataclass(frozen=True)
class Stopped:
    """A probe stopped once it could no longer reach the target: ``routed`` of
    ``requests`` had been routed; ``missed`` of them were certain to miss, ``met`` had
    ended meeting every SLO."""

    routed: int
    requests: int
    missed: int
    met: int

    @property
    def attainment_at_least(self) -> float:
        """The least its SLO attainment could have been had it run to the end."""
        return self.met / self.requests

    @property
    def attainment_at_most(self) -> float:
        """The most its SLO attainment could have been had it run to the end."""
        return (self.requests - self.missed) / self.requests


class Watched(Protocol):
    """A replay watched as it goes: an aggregated ``Cluster`` or a ``DisaggCluster``."""

    @property
    def records(self) -> Sequence[RequestRecord]: ...  # those routed so far
    def refreshed(self, index: int) -> RequestRecord: ...
    def first_token_floor(self, index: int) -> float: ...
    def route(self, upto: int) -> None: ...
    def run(self) -> RunResult: ...


class Misses:
    """Counts the requests of a running ``cluster`` certain to miss their SLOs."""

    def __init__(self, cluster: Watched, slo_ttft_ms: float | None, slo_tpot_ms: float | None):
        self.cluster = cluster
        self.slo_ttft_ms, self.slo_tpot_ms = slo_ttft_ms, slo_tpot_ms
        self.undecided: list[int] = []  # routed requests that may still meet every SLO
        self.looked = 0  # routed requests looked at so far
        self.missed = 0
        self.met = 0

    def at_most(self, routed: int) -> int:
        """The most requests that can be certain to miss once ``routed`` are: those
        counted, those undecided when last counted, and those routed since."""
        return self.missed + len(self.undecided) + routed - self.looked

    def count(self) -> int:
        """The requests routed so far that are certain to miss (those decided before
        are not looked at again: an outcome does not change once certain)."""
        cluster, ttft = self.cluster, self.slo_ttft_ms
        undecided = [*self.undecided, *range(self.looked, len(cluster.records))]
        self.looked = len(cluster.records)
        keep = []
        for i in undecided:
            record = cluster.refreshed(i)
            if record.finish_reason:  # ended: decided either way
                if meets_slo(record, ttft, self.slo_tpot_ms):
                    self.met += 1
                else:
                    self.missed += 1
                continue
            target = record.slo_ttft_ms if record.slo_ttft_ms is not None else ttft
            if target is not None:
                first = record.first_token_s
                if first is None:
                    first = cluster.first_token_floor(i)  # the first token comes no earlier
                if (first - record.arrival_s) * 1000.0 > target:
                    self.missed += 1
                    continue
            keep.append(i)
        self.undecided = keep
        return self.missed


def _cluster(d: Deployment, replicas: int) -> tuple[Watched, list[SimEngine]]:
    """``d`` on ``replicas`` replicas (a disaggregated one: ``replicas`` times each of its
    pools), and its engines."""

    def facades(n: int, config: SchedkitConfig | None = None) -> list[PolicyFacade]:
        return [PolicyFacade.from_config(config or d.config, registry=d.registry) for _ in range(n)]

    router = PolicyFacade.from_config(d.config, registry=d.registry)
    g = d.disagg
    if g is None:
        cluster = Cluster(d.requests, d.cost, d.sim_config, facades(replicas), router)
        return cluster, cluster.replicas
    p, n = (
        d.sizes(replicas)
        if d.sizes
        else (replicas * g.prefill.replicas, replicas * g.decode.replicas)
    )
    prefill = Pool(facades(p, d.pool_configs[0]), g.prefill.cost, g.prefill.config, g.prefill.tp)
    decode = Pool(facades(n, d.pool_configs[1]), g.decode.cost, g.decode.config, g.decode.tp)
    disagg = DisaggCluster(d.requests, prefill, decode, g.link, g.kv_bytes_per_token, router)
    return disagg, disagg.engines


def run_probe(d: Deployment, replicas: int, target: float | None) -> RunResult | Stopped:
    """The replay of ``d`` on ``replicas`` replicas behind the policies' router; with a
    ``target`` attainment, stopped (:class:`Stopped`) once it is certain to stay below it.
    Progress is shown as for any simulator run (``schedkit.bench.progress``)."""
    cluster, engines = _cluster(d, replicas)
    total = len(d.requests)
    with simulating(d.requests) as on_sample, no_cyclic_gc():
        if on_sample is not None:
            for engine, hook in zip(engines, per_replica(on_sample, len(engines)), strict=True):
                engine.recorder.on_sample = hook
        # a client's concurrency limit moves arrivals as it holds requests: no watching
        if target is not None and d.sim_config.max_concurrency is None:
            misses = Misses(cluster, d.slo_ttft_ms, d.slo_tpot_ms)
            every = max(1, -(-total // CHECKS))
            for upto in range(every, total + every, every):
                cluster.route(upto)
                if (total - misses.at_most(upto)) / total >= target:
                    continue  # too few could have missed since: not decided yet
                missed = misses.count()
                if (total - missed) / total < target:
                    return Stopped(min(upto, total), total, missed, misses.met)
        return cluster.run()
