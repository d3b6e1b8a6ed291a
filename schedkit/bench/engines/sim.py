"""The simulator as a bench arm's engine: the built-in one (``--engine sim``), also what
sweeps and plans run each probe point and candidate on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from schedkit.bench.disagg import simulate_disagg
from schedkit.bench.progress import per_replica, simulating
from schedkit.bench.spec import PreparedBench
from schedkit.config import SchedkitConfig
from schedkit.facade import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.cluster import Cluster
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.trust import TrustConfig
from schedkit.workload import TraceRequest

__all__ = ["run_on_sim", "simulate", "trusted_requests"]


def run_on_sim(bench: PreparedBench, index: int, rate_scale: float) -> RunResult:
    config = bench.configs[index]
    requests = trusted_requests(bench.workload(rate_scale).requests, config.trust)
    if bench.disagg is not None:
        return simulate_disagg(requests, bench.disagg, config, *bench.pool_configs[index])
    facade = PolicyFacade.from_config(config)
    replicas = bench.engine_info["replicas"]
    return simulate(requests, bench.cost, bench.sim_config, config, replicas, facade)


def simulate(
    requests: Sequence[TraceRequest],
    cost: StepCost,
    sim_config: SimConfig,
    config: SchedkitConfig,
    replicas: int,
    facade: PolicyFacade | None = None,
) -> RunResult:
    """One replay on the simulator: one engine, or ``replicas`` behind the policies'
    router (``route_request``; round-robin by default), each with its own policies. Its
    progress is shown once per simulated second while a command shows progress."""
    with simulating(requests) as on_sample:
        if replicas == 1:
            with no_cyclic_gc():
                engine = SimEngine(
                    requests, cost, sim_config, facade or PolicyFacade.from_config(config)
                )
                engine.recorder.on_sample = on_sample
                return engine.run()
        facades = [PolicyFacade.from_config(config) for _ in range(replicas)]
        router = PolicyFacade.from_config(config)
        cluster = Cluster(requests, cost, sim_config, facades, router)
        if on_sample is not None:
            for engine, hook in zip(
                cluster.replicas, per_replica(on_sample, replicas), strict=True
            ):
                engine.recorder.on_sample = hook
        return cluster.run()


def trusted_requests(
    requests: Sequence[TraceRequest], trust: TrustConfig
) -> Sequence[TraceRequest]:
    """``requests`` with tenant, priority and SLO targets as ``trust`` lets them reach
    the scheduler (``TrustConfig.for_trace``; ``docs/trust.md``); unchanged requests are
    the same objects."""
    out: list[TraceRequest] = []
    for r in requests:
        meta = trust.for_trace(r.tenant, r.priority, r.slo_ttft_ms, r.slo_tpot_ms)
        if (meta.tenant, meta.priority, meta.slo_ttft_ms, meta.slo_tpot_ms) == (
            r.tenant,
            r.priority,
            r.slo_ttft_ms,
            r.slo_tpot_ms,
        ):
            out.append(r)
        else:
            out.append(
                dataclasses.replace(
                    r,
                    tenant=meta.tenant,
                    priority=meta.priority,
                    slo_ttft_ms=meta.slo_ttft_ms,
                    slo_tpot_ms=meta.slo_tpot_ms,
                )
            )
    return out
