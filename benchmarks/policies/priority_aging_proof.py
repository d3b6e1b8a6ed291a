"""Proof figures for the priority-aging plugin: vs priority on two-class (see priority_aging.md).

    python benchmarks/policies/priority_aging_proof.py --rate-scale 3 --seeds 0 1 2 3 4

For each workload seed, replays two-class through ``priority``, ``priority-aging`` at each
``--aging-rate`` and ``fcfs`` (the limit of infinite aging), as ``schedkit bench`` does
(``Bench.run_arm``), and prints per arm: the low class's (priority 1) max queue time, its
p99 queue time and the high class's (priority 0) p90 TTFT, each p99/p90 with a paired
bootstrap 95% CI of the change against ``priority`` (``paired_bootstrap`` of
``benchmarks/stats/bootstrap.py``). A maximum has no useful bootstrap CI; the seeds are its
replicates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "stats"))  # bootstrap.py

from bootstrap import BootstrapDiff, paired_bootstrap

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.stats.estimators import Quantile
from schedkit.bench.stats.metrics import latencies_ms
from schedkit.records import RunResult


def aging(rate: float) -> str:
    return json.dumps(
        {"policy": "priority-aging", "options": {"priority-aging": {"aging_rate": rate}}}
    )


def samples(run: RunResult, key: str, priority: int) -> list[float | None]:
    """``key`` latency of each request of class ``priority``; None for the others."""
    return [latencies_ms(r)[key] if r.priority == priority else None for r in run.records]


def change(boot: BootstrapDiff) -> str:
    lo, hi = boot["rel_ci"] or (float("nan"), float("nan"))
    return f"{boot['b']:,.0f} ({boot['rel']:+.0%}, CI {lo:+.0%} .. {hi:+.0%})"


def one_seed(seed: int, rate_scale: float, rates: list[float]) -> None:
    labels = ["priority", *(f"priority-aging {r:g}/s" for r in rates), "fcfs"]
    policies = ["priority", *(aging(r) for r in rates), "fcfs"]
    spec = BenchSpec(workload="two-class", policies=policies, rate_scale=rate_scale, seed=seed)
    bench = Bench(spec)
    runs = [bench.run_arm(i, rate_scale) for i in range(len(policies))]
    base = runs[0]
    low_q, high_t = samples(base, "queue_ms", 1), samples(base, "ttft_ms", 0)
    for label, run in zip(labels, runs, strict=True):
        assert [r.request_id for r in run.records] == [r.request_id for r in base.records]
        queue = samples(run, "queue_ms", 1)
        boot = paired_bootstrap(
            {
                "low_p99": (low_q, queue, Quantile(99)),
                "high_p90": (high_t, samples(run, "ttft_ms", 0), Quantile(90)),
            },
            seed=seed,
        )
        worst = max(v for v in queue if v is not None)
        print(
            f"| {seed} | {label} | {worst:,.0f} | {change(boot['low_p99'])}"
            f" | {change(boot['high_p90'])} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-scale", type=float, default=3.0)
    parser.add_argument("--aging-rate", type=float, nargs="+", default=[0.2, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    print(f"two-class at rate-scale {args.rate_scale:g}; changes against priority\n")
    print(
        "| seed | policy | low class max queue (ms) | low class p99 queue (ms)"
        " | high class p90 TTFT (ms) |"
    )
    print("|---|---|---|---|---|")
    for seed in args.seeds:
        one_seed(seed, args.rate_scale, args.aging_rate)


if __name__ == "__main__":
    main()
