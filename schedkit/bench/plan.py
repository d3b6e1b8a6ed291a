"""Capacity planning: the cheapest deployment that meets the SLOs for a share of requests.

A candidate is a GPU type, a tensor-parallel degree and a set of engine settings. For
each, the search finds the fewest replicas at which SLO attainment (the share of
requests meeting every SLO; a rejected or unfinished request misses) reaches the
target (``--attainment``). It doubles the count from 1 until the target is met, then
bisects between the last count that missed and the first that met it, so it assumes one
more replica never lowers attainment. Every probe is kept, so a reader can check that
assumption in the table. A deployment costs replicas x TP x the GPU's hourly price
(``--price``), or its GPU count when no prices are given. The candidates are listed in
that order, each saying why it is not the chosen one (exactly one is).

What the probes share is prepared once (``prepare``): the workload, read and rescaled,
each candidate's cost model and simulator config, the policies' registry. A probe stops
as soon as it can no longer reach the target (``schedkit.bench.plan_probe``; its
attainment is then reported as below the target, its other figures not measured); the
probe at each candidate's size meets the target, so it always runs to its end. The
probes of all candidates run on a pool of processes (``schedkit.bench.plan_search``),
asking for the same probes in the same order, and so reaching the same answers, as one
search after another in this process.

The rule of thumb it is checked against (docs/planning.md): per-GPU concurrency =
(memory - weights - reserve) / (KV bytes per token x tokens per request). By Little's
law, replicas = arrival rate x mean E2E / (concurrency per replica).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import multiprocessing as mp
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedkit.bench.arms import EngineSettings
from schedkit.bench.engines.sim import trusted_requests
from schedkit.bench.plan_probe import Deployment, Sizes, Stopped, alone, run_probe
from schedkit.bench.plan_search import Probe, fewest_meeting, probe_all, settled
from schedkit.bench.progress import tracking
from schedkit.bench.runner import Bench, arrival_rate
from schedkit.bench.spec import BenchSpec
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.bench.workers import fork_pool
from schedkit.errors import SchedkitError
from schedkit.plugins import PolicyRegistry
from schedkit.sim.cost.profiles import ACTIVATION_RESERVE_BYTES_PER_GPU, get_gpu, get_model
from schedkit.workload import TraceRequest

__all__ = ["Candidate", "PlanSpec", "prepare", "probe", "rank", "rule_of_thumb", "run_plan"]


class PlanSpec(BaseModel):
    """What to plan for: the bench (workload, policy, SLOs, base engine settings) and the
    candidates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bench: BenchSpec
    gpus: list[str] = Field(min_length=1)
    tps: list[int] = Field(default_factory=lambda: [1], min_length=1)
    settings: list[EngineSettings] = Field(default_factory=lambda: [EngineSettings()])
    max_replicas: int = Field(default=64, ge=1, le=1024)
    attainment: float = Field(
        default=0.9, gt=0, le=1, description="Share of requests that must meet every SLO."
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Offered requests/s instead of the bench's --rate-scale (the trace"
        " rescaled to it), as schedkit bench --request-rate.",
    )
    prices: dict[str, float] = Field(default_factory=dict)  # GPU name -> $ per GPU-hour
    prune: bool = Field(
        default=True,
        description="Search disaggregated candidates only as far as they could be cheaper than"
        " the cheapest aggregated deployment; False sizes each of them.",
    )
    disagg: bool = Field(
        default=False,
        description="Add disaggregated candidates: for each GPU, prefill TP x decode TP (each"
        " of the TPs), each phase sized alone first, as DistServe's placement search does.",
    )
    early_stop: bool = Field(
        default=True,
        description="Stop a probe once it can no longer reach the target (its attainment"
        " then reported as below it); False runs every probe to its end.",
    )

    @model_validator(mode="before")
    @classmethod
    def _target_is_attainment(cls, data: Any) -> Any:
        """``target``, the old name of ``attainment``: still accepted, with a warning."""
        if isinstance(data, dict) and "target" in data:
            warnings.warn(
                "PlanSpec(target=...) is PlanSpec(attainment=...), as the bench names the"
                " SLO attainment share; the old name goes in a later release",
                DeprecationWarning,
                stacklevel=4,
            )
            data = {k: v for k, v in data.items() if k != "target"} | {"attainment": data["target"]}
        return data

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        if self.bench.stats.slo_ttft_ms is None and self.bench.stats.slo_tpot_ms is None:
            raise ValueError("a plan needs an SLO: give --slo-ttft-ms and/or --slo-tpot-ms")
        if self.bench.engine != "sim":
            raise ValueError("a plan runs on --engine sim")
        if self.request_rate is not None and self.bench.workload.rate_scale != 1.0:
            raise ValueError("give --rate-scale or --request-rate, not both")
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

    def rate_scale(self, bench: Bench) -> float:
        """The factor on the trace's arrival rate: ``--rate-scale``, or the one that
        offers ``--request-rate`` requests/s (as ``schedkit bench --request-rate``)."""
        if self.request_rate is None:
            return self.bench.workload.rate_scale
        return self.request_rate / arrival_rate(bench.base.requests)


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


@dataclass
class Candidate:
    """One candidate as its probes need it, prepared once before any probe runs: what
    the plan reports of it (``out``), and its deployment (None: it does not fit)."""

    out: dict[str, Any]
    bench: Bench | None = None
    deployment: Deployment | None = None
    # the most replicas (instances, for a phase alone) its search tries: beyond, it
    # would cost more than the cheapest aggregated deployment (None: --max-replicas)
    cap: int | None = None


def prepare(plan: PlanSpec) -> list[Candidate]:
    """Every candidate with its own cost model and simulator config. The workload is
    read, rescaled and passed through the trust settings once: the candidates differ in
    engine settings only, which the requests do not depend on."""
    registry = PolicyRegistry.discover()  # once, not per probe and replica
    requests: Sequence[TraceRequest] | None = None
    load: dict[str, Any] = {}
    candidates = []
    for job in _jobs(plan):
        settings = plan.settings[job.variant].overrides()
        out: dict[str, Any] = {"gpu": job.gpu, "tp": job.tp, "settings": settings, "probes": []}
        pools: dict[str, Any] = {}
        if job.phase is not None:
            out["phase"] = job.phase
            pools = {"prefill_replicas": 1, "decode_replicas": 1, f"{job.phase}_tp": job.tp}
        spec = plan.bench.with_settings({"gpu": job.gpu, "tp": job.tp, **settings, **pools})
        candidates.append(Candidate(out))
        try:
            bench = Bench(spec)
        except SchedkitError as exc:  # the model does not fit, the TP does not split it
            out["error"] = str(exc)
            continue
        _, cost, sim_config, disagg = bench.arm_engines[0]
        config = bench.configs[0]
        if requests is None:
            scale = plan.rate_scale(bench)
            offered = bench.workload(scale).requests
            load = {"rate_scale": scale, "offered_rps": arrival_rate(offered)}
            requests = trusted_requests(offered, config.trust)
        out.update(load)
        ttft, tpot = spec.stats.slo_ttft_ms, spec.stats.slo_tpot_ms
        sizes: Sizes | None = None
        if job.phase is not None:
            assert disagg is not None
            disagg, sizes = alone(disagg, job.phase), Sizes(job.phase)
            if job.phase == "prefill":  # its decodes take no time: no TPOT to judge
                tpot = None
        deployment = Deployment(
            requests, cost, sim_config, config, ttft, tpot, registry, disagg,
            bench.pool_configs[0], sizes,
        )  # fmt: skip
        candidates[-1] = Candidate(out, bench, deployment)
    return candidates


@dataclass(frozen=True)
class Job:
    """One candidate to prepare: a GPU, a TP and a set of engine settings; or one phase
    of a disaggregated deployment sized alone (``phase``: its instances' TP is ``tp``).
    The disaggregated deployments themselves are prepared from the phases (``_pairs``)."""

    gpu: str
    tp: int
    variant: int
    phase: str | None = None


def _jobs(plan: PlanSpec) -> list[Job]:
    """The aggregated candidates, in the order given: GPU, then TP, then engine settings;
    with ``disagg``, then each phase of each GPU and TP (sized alone), GPU by GPU."""
    variants = range(len(plan.settings))
    jobs = [Job(g, tp, v) for g in plan.gpus for tp in plan.tps for v in variants]
    if plan.disagg:
        jobs += [
            Job(g, tp, v, phase)
            for g in plan.gpus
            for phase in ("prefill", "decode")
            for tp in plan.tps
            for v in variants
        ]
    return jobs


_PREPARED: tuple[PlanSpec, list[Candidate]] | None = None  # also what forked workers see


def _probe(index: int, replicas: int) -> dict[str, Any]:
    """``probe`` of the prepared candidate ``index``, in this process or a worker
    forked from it."""
    assert _PREPARED is not None
    plan, candidates = _PREPARED
    return probe(plan, candidates[index], replicas)


def probe(plan: PlanSpec, candidate: Candidate, replicas: int) -> dict[str, Any]:
    """One probe's figures: ``candidate`` on ``replicas`` replicas, stopped once it
    cannot reach the target (``plan.early_stop``); its verdict is ``meets``."""
    d, out = candidate.deployment, candidate.out
    assert d is not None
    price = plan.prices.get(out["gpu"])
    figures: dict[str, Any] = {"replicas": replicas}
    if d.sizes is not None and "pool_tps" in out:  # a disaggregated deployment
        p, n = d.sizes(replicas)
        (tp_p, tp_d) = out["pool_tps"]
        figures.update(prefill_replicas=p, decode_replicas=n)
        gpus = p * tp_p + n * tp_d
    else:  # aggregated replicas, or a phase's instances
        gpus = replicas * out["tp"]
    figures.update(gpus=gpus, cost_per_hour=gpus * price if price is not None else None)
    run = run_probe(d, replicas, plan.attainment if plan.early_stop else None)
    if isinstance(run, Stopped):
        figures.update(dict.fromkeys(PROBE_FIGURES), meets=False)
        figures["stopped_early"] = {
            "after_requests": run.routed,
            "of_requests": run.requests,
            "slo_attainment_at_least": run.attainment_at_least,
            "slo_attainment_at_most": run.attainment_at_most,
        }
        return figures
    m = compute_metrics(run, slo_ttft_ms=d.slo_ttft_ms, slo_tpot_ms=d.slo_tpot_ms)
    figures.update(
        slo_attainment=m["slo_attainment"] or 0.0,
        ttft_p90_ms=m["ttft_ms"]["p90"],
        tpot_p90_ms=m["tpot_ms"]["p90"],
        e2e_mean_ms=m["e2e_ms"]["mean"],
        throughput_tok_s=m["throughput_tok_s"],
    )
    figures.update(meets=bool(figures["slo_attainment"] >= plan.attainment), stopped_early=None)
    return figures


# A probe's measured figures: None where it stopped early.
PROBE_FIGURES = ("slo_attainment", "ttft_p90_ms", "tpot_p90_ms", "e2e_mean_ms", "throughput_tok_s")


def _finish(plan: PlanSpec, candidate: Candidate, probes: dict[int, dict[str, Any]]) -> None:
    """The candidate's answer from its probes: the fewest replicas meeting the target
    (or why none does), and the probes the search asked for, by replica count."""
    out, bench = candidate.out, candidate.bench
    asked: list[int] = []

    def meets(replicas: int) -> bool:
        asked.append(replicas)
        return bool(probes[replicas]["meets"])

    most = plan.max_replicas if candidate.cap is None else candidate.cap
    high = fewest_meeting(meets, most) if most >= 1 else None
    out["probes"] = [probes[k] for k in sorted(set(asked))]
    if high is None and candidate.cap is not None and candidate.cap < plan.max_replicas:
        out["error"] = _pruned(out, most)
        return
    if high is None:
        out["error"] = f"misses the target even with {plan.max_replicas} replicas (--max-replicas)"
        return
    assert bench is not None
    out["replicas"] = high
    out["gpus"] = probes[high]["gpus"]
    out["cost_per_hour"] = probes[high]["cost_per_hour"]
    # DistServe's measure: the rate served within the SLOs, per GPU
    out["goodput_per_gpu_rps"] = out["offered_rps"] / out["gpus"]
    if "pool_tps" in out:  # the memory rule of thumb is an aggregated replica's
        out["disaggregated"] = {
            "prefill": [probes[high]["prefill_replicas"], out["pool_tps"][0]],
            "decode": [probes[high]["decode_replicas"], out["pool_tps"][1]],
        }
        out["rule_of_thumb"] = None
        return
    if "phase" in out:
        return
    out["rule_of_thumb"] = _thumb_replicas(
        bench, bench.spec, out["tp"], probes[high], out["offered_rps"]
    )


def _thumb_replicas(
    bench: Bench, spec: BenchSpec, tp: int, best: dict[str, Any], rate: float
) -> dict[str, Any]:
    """The rule of thumb for a candidate, with the replicas it asks for: by Little's law
    from the mean E2E of ``best``, the probe that met the target with the fewest, at the
    offered ``rate`` (requests/s)."""
    thumb = rule_of_thumb(bench, spec.settings.gpu, tp, spec.settings.gpu_memory_utilization)
    per_replica = thumb["concurrency_per_gpu"] * tp
    needed = rate * (best["e2e_mean_ms"] or 0.0) / 1000.0  # Little's law
    thumb["concurrency_needed"] = needed
    thumb["replicas"] = math.ceil(needed / per_replica) if per_replica > 0 else None
    return thumb


def run_plan(plan: PlanSpec) -> dict[str, Any]:
    """Search every candidate; the cheapest that meets the target, and every candidate
    in cost order with why it is not the chosen one. The probes run in parallel
    processes (``plan.bench.jobs``, default one per CPU core) forked from this one, so
    that they share the prepared candidates (``schedkit.bench.plan_search``: the same
    probes and answers as run one by one).

    With ``disagg``, as DistServe's placement search: each phase is sized alone (the
    fewest prefill instances of each TP meeting the TTFT SLO, the fewest decode
    instances meeting both, the other phase taking no time); then each pair of prefill
    and decode TPs is searched from those sizes up, one instance at a time, with both
    phases running. Pruned, a phase is searched only as far as it could be part of a
    deployment cheaper than the cheapest aggregated one (a decode phase: with the
    smallest prefill pool of its GPU), so its cap hangs on those answers; the aggregated
    candidates and the phases are searched on one pool all the same, each phase's cap
    revised as the answers come in (``_phase_caps``), with the probes and answers it
    would have searched after them."""
    candidates = prepare(plan)
    pairs = len(plan.gpus) * len(plan.tps) ** 2 * len(plan.settings) if plan.disagg else 0
    aggregated = [c for c in candidates if "phase" not in c.out]
    phases = [c for c in candidates if "phase" in c.out]
    with tracking(
        "plan", len(candidates) + pairs, "candidates", runs="probes", fine=False
    ) as track:
        _search(plan, candidates, track, staged=plan.disagg and plan.prune)
        if not plan.disagg:
            return _answer(plan, [c.out for c in aggregated])
        best = _cheapest(plan, [c.out for c in aggregated]) if plan.prune else None
        if best is not None:
            _unpaired(phases)
        disagg = _pairs(plan, phases)
        for c in disagg:
            c.cap = _pair_cap(plan, c, best)
        _search(plan, disagg, track)
    ranked = [c.out for c in aggregated] + [c.out for c in disagg]
    return _answer(plan, ranked, [c.out for c in phases])


def _cheapest(plan: PlanSpec, candidates: list[dict[str, Any]]) -> tuple[float, int] | None:
    """The cheapest feasible candidate's (cost, GPUs): what a disaggregated one must not
    exceed to be chosen (cost first, GPUs on a tie); None when none is feasible."""
    feasible = [(_cost(c), c["gpus"]) for c in candidates if "replicas" in c]
    return min(feasible) if feasible else None


def _price(plan: PlanSpec, out: dict[str, Any]) -> float:
    """What one GPU of the candidate costs in the ranking: $/h, or 1 unpriced."""
    return plan.prices.get(out["gpu"], 1.0) if plan.prices else 1.0


def _fewest_gpus(prefills: list[Candidate], gpu: str) -> int | None:
    """The fewest GPUs a prefill pool of ``gpu`` needs alone (None: none was sized)."""
    sized = [c.out["gpus"] for c in prefills if c.out["gpu"] == gpu and "gpus" in c.out]
    return min(sized, default=None)


def _unpaired(phases: list[Candidate]) -> None:
    """Each decode phase of a GPU with no prefill pool that could be part of a
    deployment cheaper than the cheapest: not searched (its cap 0: no probe run)."""
    prefills = [c for c in phases if c.out["phase"] == "prefill"]
    for c in phases:
        if c.out["phase"] != "decode" or c.deployment is None:
            continue
        if _fewest_gpus(prefills, c.out["gpu"]) is None:
            c.out["error"] = (
                "not searched: no prefill pool of this GPU could be part of a"
                " deployment cheaper than the cheapest"
            )
            c.deployment = None


def _phase_cap(
    plan: PlanSpec, out: dict[str, Any], best: tuple[float, int] | None, other: int | None
) -> int | None:
    """The most instances a phase alone is tried at: with ``other`` GPUs for the other
    phase (at the least), more could not be cheaper than ``best``; 0 when the other
    phase has no size."""
    if best is None:
        return None
    if other is None:
        return 0
    cost, gpus = best
    per_gpu = _price(plan, out)
    fits = [n for n in range(1, plan.max_replicas + 1)
            if ((n * out["tp"] + other) * per_gpu, n * out["tp"] + other) <= (cost, gpus)]  # fmt: skip
    return max(fits, default=0)


def _pair_cap(plan: PlanSpec, c: Candidate, best: tuple[float, int] | None) -> int | None:
    """The most steps a disaggregated search grows to: beyond, it could not be cheaper
    than ``best``."""
    d = c.deployment
    if best is None or d is None or d.sizes is None:
        return None
    tp_p, tp_d = c.out["pool_tps"]
    per_gpu = _price(plan, c.out)
    fits = []
    for m in range(1, plan.max_replicas + 1):
        p, n = d.sizes(m)
        g = p * tp_p + n * tp_d
        if (g * per_gpu, g) > best:
            break
        fits.append(m)
    return max(fits, default=0)


def _pruned(out: dict[str, Any], most: int) -> str:
    """Why a capped search has no size: larger, it could not be the cheapest."""
    what = f"{out['phase']} alone" if "phase" in out else "grown from each phase alone"
    if most == 0:
        return f"not searched: {what}, even its smallest size costs more than the cheapest"
    unit = "instance" if "phase" in out else "step"
    return (
        f"not searched beyond {most} {unit}{'s' if most != 1 else ''} ({what}):"
        " larger, it costs more than the cheapest"
    )


def _search(plan: PlanSpec, candidates: list[Candidate], track: Any, staged: bool = False) -> None:
    """Every runnable candidate's search, its answer in its ``out``. ``staged``: the
    aggregated candidates and the phases alone, each phase's cap hanging on the answers
    of those it is sized after (``_phase_caps``)."""
    runnable = [c for c in candidates if c.deployment is not None]
    for c in candidates:  # it does not fit: no search
        if c.deployment is None:
            track.item_done()
    workers = plan.bench.jobs or len(os.sched_getaffinity(0))
    forked = workers >= 2 and len(runnable) >= 1 and "fork" in mp.get_all_start_methods()

    def revise(found: Sequence[Mapping[int, Probe]]) -> tuple[list[int], set[int]]:
        caps, provisional = _phase_caps(plan, runnable, found)
        return [_most(plan, cap) for cap in caps], provisional

    global _PREPARED
    _PREPARED = (plan, runnable)
    try:
        pool = fork_pool(workers) if forked else None
        with pool or contextlib.nullcontext():
            most = [_most(plan, c.cap) for c in runnable]
            found = probe_all(
                len(runnable), most, _probe, pool, lambda i: track.item_done(), workers,
                revise if staged else None,
            )  # fmt: skip
    finally:
        _PREPARED = None
    if staged:
        for c, cap in zip(runnable, _phase_caps(plan, runnable, found)[0], strict=True):
            c.cap = cap
    for c, probes in zip(runnable, found, strict=True):
        _finish(plan, c, probes)


def _most(plan: PlanSpec, cap: int | None) -> int:
    """The most replicas a search with ``cap`` tries."""
    return plan.max_replicas if cap is None else cap


def _phase_caps(
    plan: PlanSpec, candidates: list[Candidate], found: Sequence[Mapping[int, Probe]]
) -> tuple[list[int | None], set[int]]:
    """Each search's cap from the probes ``found`` so far, and which caps are provisional
    (pruned, the aggregated candidates and the phases searched at once): an aggregated
    candidate's is --max-replicas; a prefill phase's hangs on the cheapest aggregated
    answer (``_phase_cap``), a decode phase's on its GPU's smallest prefill pool too.
    While the answers it hangs on are not all in, a prefill phase's cap is the one the
    cheapest aggregated probe that met so far allows (at least the final one; 0 while
    none met), a decode phase's 0."""
    kinds = [c.out.get("phase") for c in candidates]
    caps: list[int | None] = [0 if kind == "decode" else None for kind in kinds]
    aggregated = [i for i, kind in enumerate(kinds) if kind is None]
    prefills = [i for i, kind in enumerate(kinds) if kind == "prefill"]
    decodes = [i for i, kind in enumerate(kinds) if kind == "decode"]
    answers = [settled(found[i], plan.max_replicas) for i in aggregated]
    if not all(done for done, _ in answers):
        met = [(_cost(p), p["gpus"]) for i in aggregated for p in found[i].values() if p["meets"]]
        for i in prefills:  # no probe met yet: none of a phase either
            caps[i] = _phase_cap(plan, candidates[i].out, min(met), min(plan.tps)) if met else 0
        return caps, set(prefills + decodes)
    best = min([(_cost(p), p["gpus"]) for _, p in answers if p is not None], default=None)
    for i in prefills:
        caps[i] = _phase_cap(plan, candidates[i].out, best, min(plan.tps))
    sized = {i: settled(found[i], _most(plan, caps[i])) for i in prefills}
    if not all(done for done, _ in sized.values()):
        return caps, set(decodes)
    for i in decodes:  # with the smallest prefill pool of its GPU found
        gpu = candidates[i].out["gpu"]
        pools = [p["gpus"] for j, (_, p) in sized.items()
                 if p is not None and candidates[j].out["gpu"] == gpu]  # fmt: skip
        caps[i] = _phase_cap(plan, candidates[i].out, best, min(pools, default=None))
    return caps, set()


def _pairs(plan: PlanSpec, phases: list[Candidate]) -> list[Candidate]:
    """The disaggregated candidates: each GPU's prefill TP x decode TP x settings, its
    search starting from the phases' sizes alone (not runnable where either has none)."""
    sized = {
        (c.out["gpu"], c.out["phase"], c.out["tp"], json.dumps(c.out["settings"])): c
        for c in phases
    }
    out = []
    for gpu in plan.gpus:
        for tp_p in plan.tps:
            for tp_d in plan.tps:
                for variant in plan.settings:
                    key = json.dumps(variant.overrides())
                    p, d = sized[gpu, "prefill", tp_p, key], sized[gpu, "decode", tp_d, key]
                    out.append(_pair(plan, p, d))
    return out


def _pair(plan: PlanSpec, p: Candidate, d: Candidate) -> Candidate:
    """The deployment of ``p``'s prefill instances and ``d``'s decode instances, grown
    one instance at a time from each phase's size alone: first the pool whose instance
    has fewer GPUs (prefill on a tie)."""
    tps = (p.out["tp"], d.out["tp"])
    out: dict[str, Any] = {"gpu": p.out["gpu"], "tp": tps[0], "pool_tps": list(tps),
                           "settings": p.out["settings"], "probes": []}  # fmt: skip
    alone_sizes = {"prefill": p.out.get("replicas"), "decode": d.out.get("replicas")}
    out["phase_sizes"] = alone_sizes
    missing = [phase for phase, size in alone_sizes.items() if size is None]
    if missing or p.deployment is None or d.deployment is None:
        why = "; ".join(
            f"its {phase} phase: {(p if phase == 'prefill' else d).out.get('error', 'no size')}"
            for phase in missing or ["prefill"]
        )
        out["error"] = f"no disaggregated deployment: {why}"
        return Candidate(out)
    spec = plan.bench.with_settings({
        "gpu": out["gpu"], "tp": tps[0], **out["settings"], "prefill_replicas": 1,
        "decode_replicas": 1, "prefill_tp": tps[0], "decode_tp": tps[1],
    })  # fmt: skip
    try:
        bench = Bench(spec)
    except SchedkitError as exc:
        out["error"] = str(exc)
        return Candidate(out)
    _, cost, sim_config, disagg = bench.arm_engines[0]
    out.update({k: p.out[k] for k in ("rate_scale", "offered_rps")})
    first = "prefill" if tps[0] <= tps[1] else "decode"
    sizes = Sizes(start=(int(p.out["replicas"]), int(d.out["replicas"])), first=first)
    base = p.deployment
    deployment = dataclasses.replace(
        base, cost=cost, sim_config=sim_config, slo_tpot_ms=d.deployment.slo_tpot_ms,
        disagg=disagg, sizes=sizes,
    )  # fmt: skip
    return Candidate(out, bench, deployment)


def _answer(
    plan: PlanSpec, candidates: list[dict[str, Any]], phases: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The plan's result: what was planned for, the answer and the ranked candidates
    (with ``disagg``, each phase's size alone too)."""
    ranked = rank(candidates)
    offered = next((c for c in candidates if "offered_rps" in c), {})
    return {
        "workload": plan.bench.workload.name,
        "model": plan.bench.settings.model,
        "policy": plan.bench.policies[0] if plan.bench.policies else None,
        "slo": {"ttft_ms": plan.bench.stats.slo_ttft_ms, "tpot_ms": plan.bench.stats.slo_tpot_ms},
        "rate_scale": offered.get("rate_scale"),
        "offered_rps": offered.get("offered_rps"),
        "attainment": plan.attainment,
        "max_replicas": plan.max_replicas,
        "disagg": plan.disagg,
        "early_stop": plan.early_stop,
        "ranked_by": "cost per hour" if plan.prices else "GPU count",
        "best": ranked[0] if ranked and "replicas" in ranked[0] else None,
        "candidates": ranked,
        **({"phases": phases} if plan.disagg else {}),
    }


def _cost(c: dict[str, Any]) -> float:
    """What a feasible candidate is ranked by: $ per hour, or its GPU count unpriced."""
    return float(c["cost_per_hour"] if c["cost_per_hour"] is not None else c["gpus"])


def _attainment(c: dict[str, Any]) -> float:
    """SLO attainment of a feasible candidate at its size (the fewest replicas meeting it)."""
    return float(next(p["slo_attainment"] for p in c["probes"] if p["replicas"] == c["replicas"]))


def rank(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates in cost order, each with its ``outcome``: the first that meets the
    target is ``"chosen"``; every other says why not. Ties in cost go to fewer GPUs, then
    to the higher SLO attainment, then to the order the candidates were given in; those
    that meet no target come last, in that order."""
    feasible = [c for c in candidates if "replicas" in c]
    feasible.sort(key=lambda c: (_cost(c), c["gpus"], -_attainment(c)))  # stable: given order
    out = [dict(c) for c in feasible]
    for c in out:
        c["outcome"] = "chosen" if c is out[0] else _why_not(c, out[0])
    for c in candidates:
        if "replicas" not in c:
            out.append({**c, "outcome": f"not feasible: {c['error']}"})
    return out


def _why_not(c: dict[str, Any], chosen: dict[str, Any]) -> str:
    """Why the feasible candidate ``c`` is not ``chosen``, in a few words."""
    more = _cost(c) - _cost(chosen)
    if more > 0:
        if c["cost_per_hour"] is not None:
            return f"${more:,.2f}/h more"
        return f"{more:,.0f} GPU{'s' if more != 1 else ''} more"
    if c["gpus"] > chosen["gpus"]:
        return f"same cost, more GPUs ({c['gpus']} vs {chosen['gpus']})"
    mine, theirs = _attainment(c), _attainment(chosen)
    if theirs > mine:
        return f"same cost and GPUs, lower SLO attainment ({mine:.1%} vs {theirs:.1%})"
    return "same cost, GPUs and SLO attainment; the chosen was given first"
