"""Load sweeps: every arm at several offered rates, replicated, on the simulator.

A probe point is one (arm, rate, replicate) replay. Replicate ``k`` is an independent
request stream: with ``arrivals="trace"`` the ``k``-th window of ``max_requests``
consecutive requests of the trace (its own timestamps, rescaled), with
``arrivals="poisson"`` the first ``max_requests`` requests' lengths on seeded gamma
arrivals (vLLM bench's ``--request-rate`` with ``--burstiness``). Every arm replays the
same stream at each (rate, replicate). Per rate, each metric's mean over replicates
gets a Student t interval (at least ``MIN_INTERVAL_REPLICATES``; coverage checked in
``benchmarks/stats/sweep_coverage.md``).

The knee (``knee``): the lowest offered rate at which p90 TTFT exceeds ``knee_factor``
times its value at the lowest rate probed, interpolated linearly between the two probes
around the crossing; queueing shows up in TTFT, so the knee is where waiting starts to
dominate. It is found per replicate (``knee_by_replicate``), and the reports show the
replicates' mean with its interval (``knee``); ``knee_rps`` is the knee of the mean
curve. Goodput: the rate at which SLO attainment first falls below ``attainment``
(interpolated likewise), per replicate, then averaged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedkit.bench.disagg import simulate_disagg
from schedkit.bench.engines.sim import simulate, trusted_requests
from schedkit.bench.runner import Bench, arrival_rate
from schedkit.bench.spec import BenchSpec
from schedkit.bench.stats.flags import overload
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.bench.stats.sectioning import t_quantile
from schedkit.errors import SchedkitError
from schedkit.workload import TraceRequest

__all__ = ["Sweep", "SweepSpec", "aggregate", "crossing", "knee"]

UPPER = {"slo_attainment": 1.0}  # the bound of a metric's values, besides 0
# Per-replicate SLO attainment is bimodal near the knee (most streams 1.0, a few far
# lower): the t interval covered 71-87% there (benchmarks/stats/sweep_coverage.md), so
# attainment gets its range over replicates, not an interval; so do the counts, never
# checked (they are 0 in most runs).
UNCHECKED = frozenset({"slo_attainment", "rejected", "unfinished", "preemptions"})
MIN_INTERVAL_REPLICATES = 3  # fewer: means only, no interval
CONFIDENCE = 0.95
MAX_POINTS = 100_000

#: what each probe point keeps: name -> (read from compute_metrics, label)
POINT_METRICS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "ttft_p50_ms": (lambda m: m["ttft_ms"]["p50"], "p50 TTFT (ms)"),
    "ttft_p90_ms": (lambda m: m["ttft_ms"]["p90"], "p90 TTFT (ms)"),
    "ttft_p99_ms": (lambda m: m["ttft_ms"]["p99"], "p99 TTFT (ms)"),
    "tpot_p50_ms": (lambda m: m["tpot_ms"]["p50"], "p50 TPOT (ms)"),
    "tpot_p90_ms": (lambda m: m["tpot_ms"]["p90"], "p90 TPOT (ms)"),
    "queue_p90_ms": (lambda m: m["queue_ms"]["p90"], "p90 queue (ms)"),
    "e2e_p90_ms": (lambda m: m["e2e_ms"]["p90"], "p90 E2E (ms)"),
    "throughput_tok_s": (lambda m: m["throughput_tok_s"], "throughput (output tok/s)"),
    "completed_rps": (
        lambda m: m["completed"] / m["duration_s"] if m["duration_s"] > 0 else 0.0,
        "completed requests/s",
    ),
    "slo_attainment": (lambda m: m["slo_attainment"], "SLO attainment"),
    "rejected": (lambda m: m["rejected"], "rejected"),
    "unfinished": (lambda m: m["unfinished"], "unfinished"),
    "preemptions": (lambda m: m["preemptions"], "preemptions"),
}


class SweepSpec(BaseModel):
    """A load sweep: the bench's arms and settings at several rates, replicated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bench: BenchSpec
    rate_scales: list[float] = Field(default_factory=list)  # x the trace's own rate
    request_rates: list[float] = Field(default_factory=list)  # requests/s
    replicates: int = Field(default=1, ge=1, le=1000)
    arrivals: Literal["trace", "poisson"] = "trace"
    burstiness: float = Field(default=1.0, gt=0, le=100)  # gamma shape; 1 = Poisson
    knee_factor: float = Field(default=2.0, gt=1, le=1000)
    attainment: float = Field(default=0.9, gt=0, le=1)
    ray: str | None = None  # run the probe points on Ray: "local", "auto" or an address

    @model_validator(mode="after")
    def _rates(self) -> SweepSpec:
        rates = self.rate_scales or self.request_rates
        if bool(self.rate_scales) == bool(self.request_rates):
            raise ValueError("give the rates as --rate-scale or as --request-rate, not both")
        if any(not (r > 0 and math.isfinite(r)) for r in rates):
            raise ValueError("every rate must be a positive number")
        if len(set(rates)) != len(rates):
            raise ValueError("a rate is given twice; give each once")
        if self.bench.engine != "sim":
            raise ValueError("a sweep runs on --engine sim (thousands of replays)")
        return self

    @property
    def rates(self) -> list[float]:
        return sorted(self.rate_scales or self.request_rates)

    @property
    def absolute(self) -> bool:
        return bool(self.request_rates)

    def fingerprint(self) -> str:
        """What the probe points depend on (not ``jobs``): resuming needs the same."""
        data = self.model_dump(mode="json")
        data["bench"].pop("jobs", None)
        data.pop("ray", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Point:
    arm: int
    rate: int  # index into SweepSpec.rates
    replicate: int

    @property
    def key(self) -> str:
        return f"{self.arm}/{self.rate}/{self.replicate}"


class Sweep:
    """The prepared bench, the replicates' request streams and the probe points."""

    def __init__(self, spec: SweepSpec) -> None:
        self.spec = spec
        n, k = spec.bench.workload.max_requests, spec.replicates
        if spec.arrivals == "trace" and n is not None:
            bench_spec = spec.bench.replace(max_requests=n * k)
        else:
            bench_spec = spec.bench
        self.bench = Bench(bench_spec)
        base = self.bench.base.requests
        if spec.arrivals == "trace":
            size = n if n is not None else len(base) // k
            if size < 2 or len(base) < size * k:
                raise SchedkitError(
                    f"--replicates {k} needs {k} windows of {size:,} requests, but"
                    f" {self.bench.base.name} has {len(base):,}; use fewer replicates or"
                    " --max-requests, or --arrivals poisson (one set of requests, seeded"
                    " arrivals)"
                )
            self.streams = [_rebased(base[i * size : (i + 1) * size]) for i in range(k)]
        else:
            self.streams = [list(base)] * k
        self.base_rate = arrival_rate(self.streams[0] if spec.arrivals == "poisson" else list(base))
        self.points = [
            Point(a, r, i)
            for i in range(k)
            for r in range(len(spec.rates))
            for a in range(len(self.bench.arms))
        ]
        if len(self.points) > MAX_POINTS:
            raise SchedkitError(
                f"the sweep has {len(self.points):,} probe points (arms x rates x"
                f" replicates), more than {MAX_POINTS:,}; probe fewer"
            )

    def offered(self, point: Point) -> float:
        """The point's offered rate, requests/s."""
        rate = self.spec.rates[point.rate]
        if self.spec.absolute:
            return rate
        if self.spec.arrivals == "poisson":
            return rate * self.base_rate
        return rate * arrival_rate(self.streams[point.replicate])

    def nominal(self, rate_index: int) -> float:
        """The offered rate the curves plot at: absolute, or the scale x the trace's rate."""
        rate = self.spec.rates[rate_index]
        return rate if self.spec.absolute else rate * self.base_rate

    def requests(self, point: Point) -> list[TraceRequest]:
        stream = self.streams[point.replicate]
        offered = self.offered(point)
        if self.spec.arrivals == "poisson":
            seed = [self.spec.bench.workload.seed, point.replicate]
            return _gamma_arrivals(stream, offered, self.spec.burstiness, seed)
        factor = arrival_rate(stream) / offered
        return [dataclasses.replace(r, arrival_s=r.arrival_s * factor) for r in stream]

    def run(self, point: Point) -> dict[str, Any]:
        """Replay one probe point; the JSON record of it."""
        bench = self.bench
        arm = bench.arms[point.arm]
        info, cost, sim_config, disagg = bench.arm_engines[point.arm]
        requests = trusted_requests(self.requests(point), arm.config.trust)
        if disagg is not None:
            run = simulate_disagg(requests, disagg, arm.config, *arm.pool_configs)
        else:
            run = simulate(requests, cost, sim_config, arm.config, info["replicas"])
        run.policy = arm.label
        spec = self.spec.bench
        metrics = compute_metrics(
            run, slo_ttft_ms=spec.stats.slo_ttft_ms, slo_tpot_ms=spec.stats.slo_tpot_ms
        )
        return {
            "key": point.key,
            "arm": arm.label,
            "rate": self.spec.rates[point.rate],
            "offered_rps": self.offered(point),
            "replicate": point.replicate,
            "overloaded": overload(run) is not None,
            "policy_errors": run.policy_errors,
            **{name: get(metrics) for name, (get, _) in POINT_METRICS.items()},
        }


def _rebased(requests: Sequence[TraceRequest]) -> list[TraceRequest]:
    t0 = requests[0].arrival_s
    return [dataclasses.replace(r, arrival_s=r.arrival_s - t0) for r in requests]


def _gamma_arrivals(
    requests: Sequence[TraceRequest], rate: float, burstiness: float, seed: list[int]
) -> list[TraceRequest]:
    """``requests`` in order on gamma inter-arrival times of mean ``1 / rate``: shape
    ``burstiness`` (1: Poisson; lower: burstier), as vLLM bench's ``--burstiness``."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=len(requests))
    times = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return [
        dataclasses.replace(r, arrival_s=float(t)) for r, t in zip(requests, times, strict=True)
    ]


# -- aggregation --------------------------------------------------------------------


def interval(
    values: Sequence[float], lower: float | None = 0.0, upper: float | None = None
) -> dict[str, Any]:
    """Mean of the replicates' values and, with enough of them, a Student t interval,
    clipped to the values the metric can take (``lower``..``upper``; every metric
    here is non-negative, attainment at most 1)."""
    x = np.asarray(values, dtype=np.float64)
    out: dict[str, Any] = {"mean": float(x.mean()), "n": int(x.size), "ci": None}
    # Replicates that all agree (attainment 1.0 at low load) give a zero-width interval
    # that covers nothing but that value: no interval then.
    if x.size >= MIN_INTERVAL_REPLICATES and float(x.std()) > 0:
        half = t_quantile(CONFIDENCE, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
        lo, hi = out["mean"] - half, out["mean"] + half
        out["ci"] = [
            lo if lower is None else max(lower, lo),
            hi if upper is None else min(upper, hi),
        ]
    return out


def crossing(
    xs: Sequence[float], ys: Sequence[float], threshold: float, *, above: bool
) -> float | None:
    """The first x where ``ys`` crosses ``threshold`` (going above it, or below it when
    ``above`` is False), linearly interpolated between the probes around it; None when
    it never does. ``xs`` ascending; the first probe must be on the near side."""

    def beyond(y: float) -> bool:
        return y > threshold if above else y < threshold

    for i in range(1, len(xs)):
        if beyond(ys[i]) and not beyond(ys[i - 1]):
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return x0 + (threshold - y0) * (x1 - x0) / (y1 - y0) if y1 != y0 else x1
    return None


def knee(xs: Sequence[float], p90_ttft: Sequence[float | None], factor: float) -> float | None:
    """The knee of one curve (module docstring); None when p90 TTFT never exceeds
    ``factor`` x its low-load level in the rates probed (or has no samples)."""
    if any(v is None for v in p90_ttft) or len(xs) < 2:
        return None
    ys = [float(v) for v in p90_ttft if v is not None]
    return crossing(xs, ys, factor * ys[0], above=True)


def goodput(
    xs: Sequence[float], attainment: Sequence[float | None], target: float
) -> dict[str, Any]:
    """The rate at which attainment first falls below ``target``: ``value``, or which
    side of the probed range it lies on (``below`` the lowest, ``above`` the highest)."""
    ys = [0.0 if v is None else float(v) for v in attainment]
    if ys[0] < target:
        return {"value": None, "censored": "below", "bound": xs[0]}
    x = crossing(xs, ys, target, above=False)
    if x is None:
        return {"value": None, "censored": "above", "bound": xs[-1]}
    return {"value": x, "censored": None, "bound": None}


def aggregate(sweep: Sweep, points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: the curves (each metric's mean and interval per rate), the knee and the
    goodput, each also per replicate."""
    spec = sweep.spec
    rates = range(len(spec.rates))
    xs = [sweep.nominal(r) for r in rates]
    by_key = {p["key"]: p for p in points}
    arms = []
    for a, arm in enumerate(sweep.bench.arms):
        grid = [[by_key[Point(a, r, i).key] for r in rates] for i in range(spec.replicates)]
        arms.append(_arm_summary(spec, arm.label, xs, grid))
    return {"rule": _rules(spec), "arms": arms}


def _replicate_stat(values: Sequence[float], name: str, seeded: bool) -> dict[str, Any]:
    """The mean with the interval whose coverage was checked (seeded arrivals, every
    metric but attainment), else the replicates' range."""
    if seeded and name not in UNCHECKED:
        return interval(values, upper=UPPER.get(name))
    return {
        "mean": float(np.mean(values)),
        "n": len(values),
        "ci": None,
        "range": [float(min(values)), float(max(values))] if len(values) > 1 else None,
    }


def _arm_summary(
    spec: SweepSpec, label: str, xs: list[float], grid: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """One arm's curves, knee and goodput from its probe points, ``grid[replicate][rate]``,
    offered at ``xs``."""
    seeded = spec.arrivals == "poisson"
    rates = range(len(xs))
    curves = {
        name: [
            _replicate_stat([row[r][name] for row in grid], name, seeded)
            if all(row[r][name] is not None for row in grid)
            else {"mean": None, "n": 0, "ci": None}
            for r in rates
        ]
        for name in POINT_METRICS
    }
    mean_p90 = [c["mean"] for c in curves["ttft_p90_ms"]]
    knees = [knee(xs, [row[r]["ttft_p90_ms"] for r in rates], spec.knee_factor) for row in grid]
    entry: dict[str, Any] = {
        "arm": label,
        "offered_rps": xs,
        "curves": curves,
        "knee_rps": knee(xs, mean_p90, spec.knee_factor),
        "knee_by_replicate": knees,
        "knee": _replicate_stat([k for k in knees if k is not None], "knee", seeded)
        if all(k is not None for k in knees)
        else None,
        "overloaded": [[row[r]["overloaded"] for r in rates] for row in grid],
    }
    if spec.bench.stats.slo_ttft_ms is not None or spec.bench.stats.slo_tpot_ms is not None:
        per = [
            goodput(xs, [row[r]["slo_attainment"] for r in rates], spec.attainment) for row in grid
        ]
        values = [g["value"] for g in per]
        entry["goodput_by_replicate"] = per
        entry["goodput_rps"] = (
            _replicate_stat([float(v) for v in values if v is not None], "goodput", seeded)
            if all(v is not None for v in values)
            else None
        )
    return entry


def _rules(spec: SweepSpec) -> dict[str, str]:
    """How the knee, the goodput and the intervals are found, in words."""
    return {
        "knee": f"per replicate, the lowest offered rate at which p90 TTFT exceeds"
        f" {spec.knee_factor:g}x its value at the lowest rate probed (linear between"
        " probes); the figure is the replicates' mean",
        "goodput": f"per replicate, the offered rate at which SLO attainment first falls"
        f" below {spec.attainment:.0%} (linear between probes); the figure is the"
        " replicates' mean",
        "interval": f"{CONFIDENCE:.0%} Student t over replicates (at least"
        f" {MIN_INTERVAL_REPLICATES}, seeded arrivals; coverage:"
        " benchmarks/stats/sweep_coverage.md)",
    }
