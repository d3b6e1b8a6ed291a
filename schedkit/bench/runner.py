"""The A/B runner: one request stream, several policies, side-by-side results."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from schedkit.bench.metrics import compute_metrics
from schedkit.bench.records import RunResult
from schedkit.bench.report import compare_arms, write_report
from schedkit.capabilities import matrix_engine, warn_unsupported
from schedkit.config import load_config
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.sim.config import DEFAULT_EVICTION_WINDOW, SimConfig
from schedkit.sim.costmodel import RooflineCostModel, make_cost_model
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.sim.profiles import register_model_dir
from schedkit.sim.workloads import Workload, load_workload

ENGINE_GROUP = "schedkit.engines"  # entry points: engine name -> ArmRunner


class ArmRunner(Protocol):
    """An engine the bench can replay a workload on (entry-point group ``schedkit.engines``).

    Called once per arm (and per rate during a goodput search) with the prepared bench:
    ``bench.workload(rate_scale)``, ``bench.configs[index]``, ``bench.cost``,
    ``bench.sim_config`` and ``bench.spec`` hold everything an engine needs. The workload's
    requests already carry the bench's ``--slo-*`` targets where they had none of their own.
    """

    def __call__(self, bench: Bench, index: int, rate_scale: float) -> RunResult: ...


def run_on_sim(bench: Bench, index: int, rate_scale: float) -> RunResult:
    facade = PolicyFacade.from_config(bench.configs[index])
    with no_cyclic_gc():
        engine = SimEngine(
            bench.workload(rate_scale).requests, bench.cost, bench.sim_config, facade
        )
        return engine.run()


def engines() -> dict[str, str]:
    """Engine name -> where it comes from: the built-in simulator plus installed adapters."""
    found = {"sim": "schedkit"}
    for ep in metadata.entry_points(group=ENGINE_GROUP):
        found.setdefault(ep.name, ep.dist.name if ep.dist else ep.value)
    return found


def load_engine(name: str) -> ArmRunner:
    if name == "sim":
        return run_on_sim
    for ep in metadata.entry_points(group=ENGINE_GROUP):
        if ep.name == name:
            try:
                runner: ArmRunner = ep.load()
            except Exception as exc:
                raise SchedkitError(f"cannot load engine {name!r} from {ep.value}: {exc}") from exc
            return runner
    raise SchedkitError(
        f"unknown engine {name!r}; installed: {', '.join(engines())}. vllm-twin and vllm come"
        " with schedkit-vllm (adapters/vllm), sglang with schedkit-sglang."
    )


GOODPUT_TARGET = 0.9  # DistServe: the rate at which 90% of requests meet both SLOs


class BenchSpec(BaseModel):
    """Everything ``schedkit bench`` was asked to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    policies: list[str] = Field(min_length=1)
    engine: str = "sim"
    model: str = "Llama-3-8B"
    gpu: str = "H100-SXM"
    tp: int = Field(default=1, ge=1)
    profile: str | None = None
    rate_scale: float = Field(default=1.0, gt=0)
    max_requests: int | None = Field(default=None, gt=0)
    seed: int = 0
    slo_ttft_ms: float | None = Field(default=None, gt=0)
    slo_tpot_ms: float | None = Field(default=None, gt=0)
    goodput: bool = False
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    block_size: int = Field(default=16, gt=0)
    prefix_caching: bool = True
    kv_blocks: int | None = Field(default=None, gt=0)
    eviction_window: int | None = Field(default=None, ge=0)


Progress = Callable[[str, int, int], None]  # (arm label, requests done, total)


class Bench:
    """Prepared workload, cost model and engine config shared by every arm."""

    def __init__(self, spec: BenchSpec) -> None:
        self.runner = load_engine(spec.engine)
        self.spec = spec
        base = load_workload(spec.workload, seed=spec.seed)
        if spec.max_requests:
            base = base.truncated(spec.max_requests)
        if not base.requests:
            raise SchedkitError(f"workload {spec.workload!r} has no requests")
        # Policies see the SLOs the report judges them by: the --slo-* targets become the
        # requests' own wherever the workload gives none (a request's own SLO wins), so every
        # engine passes them to policies as RequestView.slo_ttft_ms / slo_tpot_ms.
        self.base = base.with_default_slos(spec.slo_ttft_ms, spec.slo_tpot_ms)
        model_name = register_model_dir(spec.model) or spec.model
        self.cost, model, gpu = make_cost_model(model_name, spec.gpu, spec.tp, spec.profile)
        blocks = spec.kv_blocks or RooflineCostModel(model, gpu, spec.tp).kv_capacity_blocks(
            spec.block_size, spec.gpu_memory_utilization
        )
        self.sim_config = SimConfig(
            num_blocks=blocks,
            block_size=spec.block_size,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            enable_prefix_caching=spec.prefix_caching,
            hash_block_tokens=base.hash_block_tokens,
            eviction_window=(
                DEFAULT_EVICTION_WINDOW if spec.eviction_window is None else spec.eviction_window
            ),
        )
        self.configs = [load_config(p) for p in spec.policies]
        self.labels = _arm_labels(spec.policies, [c.label for c in self.configs])
        # Fail on unknown policies or bad options before running, and warn (the capability
        # matrix's words) where the engine honours a hook a policy uses only in part.
        self.warnings: list[str] = []
        for cfg in self.configs:
            facade = PolicyFacade.from_config(cfg)
            for message in warn_unsupported(facade, matrix_engine(spec.engine)):
                if message not in self.warnings:
                    self.warnings.append(message)
        self.engine_info: dict[str, Any] = {
            "engine": spec.engine,
            "model": model.name,
            "gpu": gpu.name,
            "tp": spec.tp,
            "cost_model": self.cost.describe(),
            **self.sim_config.model_dump(exclude={"timeline_interval_s"}),
        }

    def workload(self, rate_scale: float) -> Workload:
        return self.base.scaled(rate_scale) if rate_scale != 1.0 else self.base

    def run_arm(self, index: int, rate_scale: float) -> RunResult:
        return self.runner(self, index, rate_scale)

    def metrics(self, run: RunResult) -> dict[str, Any]:
        return compute_metrics(
            run, slo_ttft_ms=self.spec.slo_ttft_ms, slo_tpot_ms=self.spec.slo_tpot_ms
        )

    def goodput(self, index: int) -> dict[str, Any]:
        """Highest request rate at which >= 90% of requests meet both SLOs (bisection)."""
        base_rate = _rate(self.base)

        def attainment(scale: float) -> float:
            value = self.metrics(self.run_arm(index, scale))["slo_attainment"]
            return float(value) if value is not None else 0.0

        lo, hi = 0.0, self.spec.rate_scale
        while attainment(hi) >= GOODPUT_TARGET and hi < 1024:
            lo, hi = hi, hi * 2
        if lo == 0.0:
            lo = hi
            while lo > 1e-3 and attainment(lo) < GOODPUT_TARGET:
                hi, lo = lo, lo / 2
            if lo <= 1e-3:
                return {"goodput_rps": 0.0, "goodput_rate_scale": 0.0}
        for _ in range(6):
            mid = (lo + hi) / 2
            if attainment(mid) >= GOODPUT_TARGET:
                lo = mid
            else:
                hi = mid
        return {"goodput_rps": lo * base_rate, "goodput_rate_scale": lo}


def _arm_labels(specs: list[str], labels: list[str]) -> list[str]:
    """One distinct label per arm: the policies, or a config file's name, numbered if repeated."""
    names = [
        Path(s).stem if s.endswith((".toml", ".json")) else lab
        for s, lab in zip(specs, labels, strict=True)
    ]
    return [
        f"{n}#{names[:i].count(n) + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)
    ]


def _rate(workload: Workload) -> float:
    reqs = workload.requests
    span = reqs[-1].arrival_s - reqs[0].arrival_s
    return len(reqs) / span if span > 0 else float(len(reqs))


def run_bench(spec: BenchSpec, out_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Run every arm on the identical request stream; write results.json and reports."""
    bench = Bench(spec)
    no_slo = spec.slo_ttft_ms is None and spec.slo_tpot_ms is None
    if (
        spec.goodput
        and no_slo
        and not any(r.slo_ttft_ms or r.slo_tpot_ms for r in bench.base.requests)
    ):
        raise SchedkitError("--goodput needs SLOs: pass --slo-ttft-ms and/or --slo-tpot-ms")
    runs: list[RunResult] = []
    arms: list[dict[str, Any]] = []
    for i, cfg in enumerate(bench.configs):
        label = bench.labels[i]
        if progress:
            progress(label, i, len(bench.configs))
        run = bench.run_arm(i, spec.rate_scale)
        run.policy = label
        metrics = bench.metrics(run)
        if spec.goodput:
            metrics.update(bench.goodput(i))
        runs.append(run)
        arms.append({"policy": label, "config": cfg.model_dump(), "metrics": metrics})
    if progress:
        progress("done", len(bench.configs), len(bench.configs))
    workload = bench.workload(spec.rate_scale)
    results: dict[str, Any] = {
        "workload": {**workload.summary(), "rate_scale": spec.rate_scale, "seed": spec.seed},
        "engine": bench.engine_info,
        "slo": {"ttft_ms": spec.slo_ttft_ms, "tpot_ms": spec.slo_tpot_ms},
        "arms": arms,
        "warnings": bench.warnings,
    }
    results["comparisons"] = compare_arms(
        runs,
        [a["metrics"] for a in arms],
        slo_ttft_ms=spec.slo_ttft_ms,
        slo_tpot_ms=spec.slo_tpot_ms,
        seed=spec.seed,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    write_report(out_dir, results, runs)
    return results
