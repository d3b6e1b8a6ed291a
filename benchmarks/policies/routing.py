"""Routing on a simulated cluster: mooncake-conv at its recorded rate, 2-16 replicas of
Llama-3-8B on H100, round-robin vs least-loaded vs prefix-affinity (issue #14 part 3).

    python benchmarks/policies/routing.py [--replicas 2,3,4,6,8,12,16] [--out TABLE.md]

Each row is one `schedkit bench --workload mooncake-conv --replicas N --policy P` arm;
the bench's paired verdicts for prefix-affinity vs round-robin are in the last columns.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from schedkit.bench.runner import Bench, BenchSpec, run_arms
from schedkit.bench.stats.compare import compare_arms
from schedkit.bench.stats.flags import overload

POLICIES = ["round-robin", "least-loaded", "prefix-affinity"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", default="2,3,4,6,8,12,16")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [
        "| replicas | router | prefix hit rate | TTFT mean s | TTFT p50 s | TTFT p90 s |"
        " throughput tok/s | overloaded | p90 TTFT vs round-robin (95% CI) |",
        "|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    started = time.perf_counter()
    for n in [int(x) for x in args.replicas.split(",")]:
        bench = Bench(BenchSpec(workload="mooncake-conv", replicas=n, policies=POLICIES))
        runs, metrics = run_arms(bench)
        for run, label in zip(runs, bench.labels, strict=True):
            run.policy = label
        verdicts = compare_arms(runs, slo_ttft_ms=None, slo_tpot_ms=None, min_effect=0.02)
        p90 = {
            c["policy"]: next(m for m in c["metrics"] if m["metric"] == "ttft_p90_ms")
            for c in verdicts
        }
        for run, m in zip(runs, metrics, strict=True):
            t = m["ttft_ms"]
            cell = ""
            if run.policy in p90:
                v = p90[run.policy]
                ci = v.get("rel_ci") or [None, None]
                cell = (
                    f"{v['rel']:+.1%} ({ci[0]:+.1%} .. {ci[1]:+.1%}): {v['tone']}"
                    if ci[0] is not None
                    else f"{v['rel']:+.1%}: {v['tone']}"
                )
            lines.append(
                f"| {n} | {run.policy} | {m['prefix_hit_rate']:.1%} | {t['mean'] / 1e3:,.2f} |"
                f" {t['p50'] / 1e3:,.2f} | {t['p90'] / 1e3:,.2f} | {m['throughput_tok_s']:,.0f} |"
                f" {'yes' if overload(run) else 'no'} | {cell} |"
            )
        print(lines[-3], lines[-2], lines[-1], sep="\n", flush=True)
    table = "\n".join(lines)
    print(f"\n{table}\n\n{time.perf_counter() - started:.0f} s")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
