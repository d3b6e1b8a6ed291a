"""Coverage of the sweep's 95% intervals (``schedkit.bench.sweep.spec.interval``).

A sweep's interval at one rate is a Student t interval over K replicates' values of a
metric (say p90 TTFT), each replicate an independent request stream. Its target is
the metric's expected value over streams. Here the truth is the mean over ``--pool``
replicates of one workload (seeded gamma arrivals, as ``--arrivals poisson``), and
``--draws`` sets of K replicates drawn from that pool without replacement give the
intervals; coverage is the share that contain the truth. The knee and goodput
intervals are checked the same way from each replicate's own knee and goodput.

    .venv/bin/python benchmarks/stats/sweep_coverage.py --out benchmarks/stats

Writes ``sweep_coverage.json`` and prints a table (also in ``sweep_coverage.md``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.bench.runner import BenchSpec
from schedkit.bench.sweep.spec import Sweep, SweepSpec, goodput, interval, knee

WORKLOAD = "poisson:rate=20,n=600,prompt=1024,output=128"  # lengths; arrivals re-drawn
RATES = [10.0, 20.0, 25.0, 30.0, 35.0, 40.0, 50.0, 60.0]  # req/s: light, the knee (~22), overload
METRICS = (
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "queue_p90_ms",
    "e2e_p90_ms", "throughput_tok_s", "completed_rps", "slo_attainment",
)  # fmt: skip
SLO = {"slo_ttft_ms": 500.0, "slo_tpot_ms": 50.0}

_SWEEP: Sweep | None = None


def _run(replicate: int) -> list[dict[str, Any]]:
    assert _SWEEP is not None
    return [_SWEEP.run(p) for p in _SWEEP.points if p.replicate == replicate]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/stats"))
    args = parser.parse_args()
    global _SWEEP
    spec = SweepSpec(
        bench=BenchSpec(workload=WORKLOAD, policies=["fcfs"], **SLO),
        request_rates=RATES,
        replicates=args.pool,
        arrivals="poisson",
    )
    _SWEEP = Sweep(spec)
    started = time.perf_counter()
    with ProcessPoolExecutor(mp_context=mp.get_context("fork")) as pool:
        rows = [r for batch in pool.map(_run, range(args.pool), chunksize=4) for r in batch]
    seconds = time.perf_counter() - started
    # values[metric][rate][replicate]
    values = {
        m: np.array([[r[m] for r in rows if r["rate"] == rate] for rate in RATES], dtype=float)
        for m in METRICS
    }
    knees = np.array([
        np.nan if (k := knee(RATES, list(values["ttft_p90_ms"][:, i]), 2.0)) is None else k
        for i in range(args.pool)
    ])  # fmt: skip
    goodputs = np.array([
        np.nan if (g := goodput(RATES, list(values["slo_attainment"][:, i]), 0.9)["value"]) is None
        else g
        for i in range(args.pool)
    ])  # fmt: skip
    rng = np.random.default_rng(12345)
    table: list[dict[str, Any]] = []
    for k in (3, 5, 10):
        draws = [rng.choice(args.pool, size=k, replace=False) for _ in range(args.draws)]

        def coverage(series: np.ndarray, draws: list[np.ndarray] = draws) -> float | None:
            if np.isnan(series).any():
                return None
            truth = float(series.mean())
            cis = [interval(list(series[d]), lower=None)["ci"] for d in draws]
            hits = [ci[0] <= truth <= ci[1] for ci in cis if ci is not None]
            return float(np.mean(hits)) if hits else None

        def with_interval(series: np.ndarray, draws: list[np.ndarray] = draws) -> float:
            return float(np.mean([interval(list(series[d]))["ci"] is not None for d in draws]))

        for m in METRICS:
            for j, rate in enumerate(RATES):
                series = values[m][j]
                table.append({
                    "k": k, "what": m, "rate": rate, "coverage": coverage(series),
                    "with_interval": with_interval(series),
                })  # fmt: skip
        for name, series in (("knee", knees), ("goodput", goodputs)):
            table.append({
                "k": k, "what": name, "rate": None, "coverage": coverage(series),
                "with_interval": None if np.isnan(series).any() else with_interval(series),
            })  # fmt: skip
    result = {
        "workload": WORKLOAD, "rates_rps": RATES, "pool": args.pool, "draws": args.draws,
        "slo": SLO, "seconds": seconds, "table": table,
        "knee_missing": int(np.isnan(knees).sum()), "goodput_missing": int(np.isnan(goodputs).sum()),
        "truth": {m: list(values[m].mean(axis=1)) for m in METRICS},
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep_coverage.json").write_text(json.dumps(result, indent=2))
    print(f"{args.pool} replicates x {len(RATES)} rates in {seconds:.0f} s")
    for row in table:
        cov = "n/a" if row["coverage"] is None else f"{row['coverage']:.1%}"
        share = "" if row["with_interval"] is None else f"{row['with_interval']:.0%}"
        print(f"K={row['k']:>2} {row['what']:<18} {row['rate'] or '':>5} {cov:>7} {share:>5}")


if __name__ == "__main__":
    main()
