"""Capacity planning: the cheapest deployment that meets the SLOs for a share of requests.

A candidate is a GPU type, a tensor-parallel degree and a set of engine settings. For
each, the search finds the fewest replicas at which SLO attainment (the share of
requests meeting every SLO; a rejected or unfinished request misses) reaches the
target. It doubles the count from 1 until the target is met, then bisects between the
last count that missed and the first that met it, so it assumes one more replica
never lowers attainment. Every probe is kept, so a reader can check that assumption in
the table. A deployment costs replicas x TP x the GPU's hourly price (``--price``), or
its GPU count when no prices are given.

The rule of thumb it is checked against (docs/planning.md): per-GPU concurrency =
(memory - weights - reserve) / (KV bytes per token x tokens per request). By Little's
law, replicas = arrival rate x mean E2E / (concurrency per replica).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedkit.bench.arms import EngineSettings
from schedkit.bench.engines.sim import simulate, trusted_requests
from schedkit.bench.runner import Bench, arrival_rate
from schedkit.bench.spec import BenchSpec
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.bench.workers import fork_pool
from schedkit.errors import SchedkitError
from schedkit.sim.cost.profiles import ACTIVATION_RESERVE_BYTES_PER_GPU, get_gpu, get_model

__all__ = ["PlanSpec", "rule_of_thumb", "run_plan"]


class PlanSpec(BaseModel):
    """What to plan for: the bench (workload, policy, SLOs, base engine settings) and the
    candidates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bench: BenchSpec
    gpus: list[str] = Field(min_length=1)
    tps: list[int] = Field(default_factory=lambda: [1], min_length=1)
    settings: list[EngineSettings] = Field(default_factory=lambda: [EngineSettings()])
    max_replicas: int = Field(default=64, ge=1, le=1024)
    target: float = Field(default=0.9, gt=0, le=1)
    prices: dict[str, float] = Field(default_factory=dict)  # GPU name -> $ per GPU-hour

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        if self.bench.stats.slo_ttft_ms is None and self.bench.stats.slo_tpot_ms is None:
            raise ValueError("a plan needs an SLO: give --slo-ttft-ms and/or --slo-tpot-ms")
        if self.bench.engine != "sim":
            raise ValueError("a plan runs on --engine sim")
        bad = sorted(p for p, v in self.prices.items() if not (v > 0 and math.isfinite(v)))
        if bad:
            raise ValueError(f"--price for {bad[0]} must be a positive number ($ per GPU-hour)")
        missing = sorted(set(self.gpus) - set(self.prices)) if self.prices else []
        if missing:
            raise ValueError(
                f"--price is given for some GPUs but not {', '.join(missing)}; price every"
                " candidate GPU, or none (then deployments are ranked by GPU count)"
            )
        return self


def rule_of_thumb(bench: Bench, gpu_name: str, tp: int, utilization: float) -> dict[str, Any]:
    """The seed's per-GPU concurrency rule for one candidate."""
    model, gpu = get_model(bench.spec.settings.model), get_gpu(gpu_name)
    reqs = bench.base.requests
    tokens = sum(r.prompt_tokens + r.output_tokens for r in reqs) / len(reqs)
    memory = gpu.mem_gb * 1e9 * utilization
    per_gpu = (memory - model.weight_bytes / tp - ACTIVATION_RESERVE_BYTES_PER_GPU) / (
        model.kv_bytes_per_token / max(1, min(tp, model.num_kv_heads)) * tokens
    )
    return {"tokens_per_request": tokens, "concurrency_per_gpu": max(0.0, per_gpu)}


_PLAN: PlanSpec | None = None


def _candidate(job: tuple[str, int, int]) -> dict[str, Any]:
    assert _PLAN is not None
    return search(_PLAN, *job)


def search(plan: PlanSpec, gpu: str, tp: int, variant: int) -> dict[str, Any]:
    """One candidate: every probe and the fewest replicas meeting the target (or why
    none does)."""
    settings = plan.settings[variant].overrides()
    spec = plan.bench.with_settings({"gpu": gpu, "tp": tp, **settings})
    out: dict[str, Any] = {"gpu": gpu, "tp": tp, "settings": settings, "probes": []}
    try:
        bench = Bench(spec)
    except SchedkitError as exc:  # the model does not fit, the TP does not split it
        out["error"] = str(exc)
        return out
    _, cost, sim_config = bench.arm_engines[0]
    config = bench.configs[0]
    requests = trusted_requests(bench.workload(spec.workload.rate_scale).requests, config.trust)
    probes: dict[int, dict[str, Any]] = {}

    def probe(replicas: int) -> bool:
        if replicas not in probes:
            run = simulate(requests, cost, sim_config, config, replicas)
            m = compute_metrics(
                run, slo_ttft_ms=spec.stats.slo_ttft_ms, slo_tpot_ms=spec.stats.slo_tpot_ms
            )
            probes[replicas] = {
                "replicas": replicas,
                "gpus": replicas * tp,
                "slo_attainment": m["slo_attainment"] or 0.0,
                "ttft_p90_ms": m["ttft_ms"]["p90"],
                "tpot_p90_ms": m["tpot_ms"]["p90"],
                "e2e_mean_ms": m["e2e_ms"]["mean"],
                "throughput_tok_s": m["throughput_tok_s"],
            }
        return bool(probes[replicas]["slo_attainment"] >= plan.target)

    high = _fewest_meeting(probe, plan.max_replicas)
    out["probes"] = [probes[k] for k in sorted(probes)]
    if high is None:
        out["error"] = f"misses the target with {plan.max_replicas} replicas (--max-replicas)"
        return out
    out["replicas"] = high
    out["gpus"] = high * tp
    price = plan.prices.get(gpu)
    out["cost_per_hour"] = high * tp * price if price is not None else None
    out["rule_of_thumb"] = _thumb_replicas(bench, spec, gpu, tp, probes[high])
    return out


def _fewest_meeting(meets: Callable[[int], bool], max_replicas: int) -> int | None:
    """The fewest replicas (up to ``max_replicas``) for which ``meets`` holds, or None:
    doubling from 1 until it holds, then bisecting between the last count that missed and
    the first that met it (so it assumes one more replica never hurts)."""
    low, high = 0, 1  # low: a count known to miss (0: none yet); high: the count to try
    while high <= max_replicas and not meets(high):
        low, high = high, high * 2
    if high > max_replicas:
        if low < max_replicas and meets(max_replicas):
            high = max_replicas
        else:
            return None
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            high = mid
        else:
            low = mid
    return high


def _thumb_replicas(
    bench: Bench, spec: BenchSpec, gpu: str, tp: int, best: dict[str, Any]
) -> dict[str, Any]:
    """The rule of thumb for a candidate, with the replicas it asks for: by Little's law
    from the mean E2E of ``best``, the probe that met the target with the fewest."""
    thumb = rule_of_thumb(bench, gpu, tp, spec.settings.gpu_memory_utilization)
    per_replica = thumb["concurrency_per_gpu"] * tp
    rate = arrival_rate(bench.workload(spec.workload.rate_scale).requests)
    needed = rate * (best["e2e_mean_ms"] or 0.0) / 1000.0  # Little's law
    thumb["concurrency_needed"] = needed
    thumb["replicas"] = math.ceil(needed / per_replica) if per_replica > 0 else None
    return thumb


def run_plan(plan: PlanSpec) -> dict[str, Any]:
    """Search every candidate (in parallel processes); the cheapest that meets the target."""
    jobs = [(g, tp, v) for g in plan.gpus for tp in plan.tps for v in range(len(plan.settings))]
    workers = min(len(jobs), plan.bench.jobs or len(os.sched_getaffinity(0)))
    global _PLAN
    _PLAN = plan
    try:
        if workers < 2 or "fork" not in mp.get_all_start_methods():
            candidates = [_candidate(j) for j in jobs]
        else:
            with fork_pool(workers) as pool:
                candidates = list(pool.map(_candidate, jobs))
    finally:
        _PLAN = None
    feasible = [c for c in candidates if "replicas" in c]

    def price(c: dict[str, Any]) -> tuple[float, int, str, int]:
        value = c["cost_per_hour"] if c["cost_per_hour"] is not None else float(c["gpus"])
        return (value, c["gpus"], c["gpu"], c["tp"])

    best = min(feasible, key=price) if feasible else None
    return {
        "target": plan.target,
        "ranked_by": "cost per hour" if plan.prices else "GPU count",
        "best": best,
        "candidates": candidates,
    }
