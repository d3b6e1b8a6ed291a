"""A/A coverage of the bench's confidence intervals: do nominal 95% intervals cover?

The same policy (fcfs) runs against itself on independent request streams of one
distribution: arm A on ``poisson:...,seed=2k``, arm B on ``seed=2k+1``, paired by arrival
index as the bench pairs arms. The true difference of every statistic is 0, so a 95%
interval should contain 0 in 95% of the pairs. Each pair gets four intervals:

- ``sectioning``: what ``schedkit bench`` prints (``schedkit.bench.stats.compare.interval``:
  up to 10 stretches of consecutive arrivals, a Student t interval, none where one
  episode carries the difference, ``schedkit.bench.stats.episodes``);
- ``sectioning (no episode test)``: the same interval printed even then, as before #38;
- ``block bootstrap``: the paired circular block bootstrap with the Politis-White block
  length (``paired_bootstrap(block=...)``), the other method valid under dependence;
- ``iid bootstrap``: requests resampled independently, what schedkit printed before.

    .venv/bin/python benchmarks/stats/interval_coverage.py --out benchmarks/stats

writes ``interval_coverage.json`` and prints the table kept in ``interval_coverage.md``. Coverage
carries a binomial standard error of sqrt(p(1-p)/pairs): 1.5 points at 200 pairs.
``--methods`` runs some of the methods only (the bootstraps take most of the time),
``--jobs`` runs that many pairs at once.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from bootstrap import paired_bootstrap  # benchmarks/stats, this script's directory

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.spec import DEFAULT_MIN_EFFECT
from schedkit.bench.stats.compare import METRICS, Compared, interval
from schedkit.bench.stats.estimators import FloatArray, Mean, Quantile, Statistic
from schedkit.bench.stats.paired import samples
from schedkit.bench.stats.sectioning import block_length, ranks, sectioned_diff

STATISTICS: dict[str, tuple[str, Statistic]] = {
    "p50 TTFT": ("ttft_ms", Quantile(50)),
    "p90 TTFT": ("ttft_ms", Quantile(90)),
    "p99 TTFT": ("ttft_ms", Quantile(99)),
    "p90 TPOT": ("tpot_ms", Quantile(90)),
    "p90 E2E": ("e2e_ms", Quantile(90)),
    "SLO attainment": ("met_slo", Mean()),
}
#: The bench's metric behind each statistic: its interval is what the bench prints.
COMPARED: dict[str, Compared] = {
    name: next(m for m in METRICS if m.label == name) for name in STATISTICS
}
METHODS = ("sectioning", "sectioning (no episode test)", "block bootstrap", "iid bootstrap")
SLO_TTFT_MS = 100.0  # for the attainment row: about the median TTFT at these loads
SETTINGS = ((22.0, 2000, 200), (18.0, 4000, 200), (22.0, 8000, 200), (26.0, 8000, 200))


def arm(rate: float, n: int, seed: int) -> dict[str, FloatArray]:
    spec = BenchSpec(
        workload=f"poisson:rate={rate:g},n={n},seed={seed}",
        policies=["fcfs"],
        slo_ttft_ms=SLO_TTFT_MS,
    )
    return samples(Bench(spec).run_arm(0, 1.0), slo_ttft_ms=SLO_TTFT_MS)


def intervals(
    a: dict[str, FloatArray],
    b: dict[str, FloatArray],
    seed: int,
    n_boot: int,
    methods: tuple[str, ...] = METHODS,
) -> dict[str, dict[str, list[float] | None]]:
    """Method -> statistic -> the 95% interval of b - a (None: the method gives none)."""
    series = {name: (a[key], b[key], stat) for name, (key, stat) in STATISTICS.items()}
    out: dict[str, dict[str, list[float] | None]] = {}
    if "sectioning" in methods:
        out["sectioning"] = {
            name: interval(COMPARED[name], s[0], s[1], DEFAULT_MIN_EFFECT)["ci"]
            for name, s in series.items()
        }
    if "sectioning (no episode test)" in methods:
        out["sectioning (no episode test)"] = {
            name: sectioned_diff(*s)["ci"] for name, s in series.items()
        }
    block = max(block_length(ranks(x[k])) for x in (a, b) for k in ("ttft_ms", "tpot_ms", "e2e_ms"))
    for method, size in (("block bootstrap", block), ("iid bootstrap", 1)):
        if method in methods:
            boot = paired_bootstrap(series, n_boot=n_boot, seed=seed, block=size)
            out[method] = {name: r["ci"] for name, r in boot.items()}
    return out


def coverage(
    rate: float,
    n: int,
    pairs: int,
    n_boot: int,
    offset: int = 0,
    methods: tuple[str, ...] = METHODS,
    jobs: int = 1,
) -> dict[str, Any]:
    covered = {m: dict.fromkeys(STATISTICS, 0) for m in methods}
    given = {m: dict.fromkeys(STATISTICS, 0) for m in methods}
    widths: dict[str, dict[str, list[float]]] = {m: {s: [] for s in STATISTICS} for m in methods}
    withheld = dict.fromkeys(STATISTICS, 0)  # pairs whose interval the episode test withheld
    started = time.perf_counter()
    tasks = [(rate, n, offset + 2 * k, k, n_boot, methods) for k in range(pairs)]
    with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
        done = pool.map(_pair, tasks) if pool is not None else map(_pair, tasks)
        for found in done:
            for method, per in found.items():
                for name, ci in per.items():
                    if ci is not None:
                        given[method][name] += 1
                        covered[method][name] += int(ci[0] <= 0.0 <= ci[1])
                        widths[method][name].append(ci[1] - ci[0])
            if {"sectioning", "sectioning (no episode test)"} <= set(found):
                for name, ci in found["sectioning (no episode test)"].items():
                    withheld[name] += int(ci is not None and found["sectioning"][name] is None)
    return {
        "workload": f"poisson:rate={rate:g},n={n}",
        "policy": "fcfs vs fcfs (independent seeds)",
        "pairs": pairs,
        "seeds": [offset, offset + 2 * pairs - 1],
        "n_boot": n_boot,
        "coverage": {
            m: {s: covered[m][s] / given[m][s] if given[m][s] else None for s in STATISTICS}
            for m in methods
        },
        "with_interval": {m: {s: given[m][s] / pairs for s in STATISTICS} for m in methods},
        "median_width": {
            m: {s: float(np.median(w)) if w else None for s, w in per.items()}
            for m, per in widths.items()
        },
        "withheld_by_episode_test": withheld,
        "seconds": time.perf_counter() - started,
        "jobs": jobs,
    }


def _pair(
    task: tuple[float, int, int, int, int, tuple[str, ...]],
) -> dict[str, dict[str, list[float] | None]]:
    """One A/A pair's intervals: arms on seeds ``seed`` and ``seed + 1``."""
    rate, n, seed, k, n_boot, methods = task
    return intervals(arm(rate, n, seed), arm(rate, n, seed + 1), k, n_boot, methods)


def _cell(value: float | None) -> str:
    return "no interval" if value is None else f"{value:.1%}"


def table(results: list[dict[str, Any]]) -> str:
    methods = [m for m in METHODS if m in results[0]["coverage"]]
    lines = [
        "| workload | statistic | " + " | ".join(methods) + " |",
        "|---|---|" + "---:|" * len(methods),
    ]
    for r in results:
        for name in STATISTICS:
            cells = [_cell(r["coverage"][m][name]) for m in methods]
            lines.append(f"| {r['workload']} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--pairs", type=int, default=None, help="pairs per setting (default: each setting's)"
    )
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="first workload seed (fresh seeds check constants chosen on earlier ones)",
    )
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated methods to run (default: all of them)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="pairs run at once (processes)")
    parser.add_argument("--name", default="interval_coverage.json", help="file name under --out")
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON")
    args = parser.parse_args()
    methods = tuple(m.strip() for m in args.methods.split(","))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown --methods {unknown}; choose from {', '.join(METHODS)}")
    results = [
        coverage(rate, n, args.pairs or pairs, args.n_boot, args.seed_offset, methods, args.jobs)
        for rate, n, pairs in SETTINGS
    ]
    print(table(results))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / args.name).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
