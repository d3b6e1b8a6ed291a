"""Time to compare two 20,000-request arms: every verdict of one A/B pair.

Runs the demo's two arms once (azure-conv at 4x rate: fcfs and shortest-prompt, 19,366
requests each) and times ``compare_arms`` on them, best of ``--repeat``. Run it once on
this tree and once on an older one to compare, with the same interpreter::

    .venv/bin/python benchmarks/speed/compare_speed.py
    git worktree add /tmp/schedkit-old 941cb60
    PYTHONPATH=/tmp/schedkit-old .venv/bin/python benchmarks/speed/compare_speed.py

(941cb60 is the last commit with the pure-Python bootstrap; its ``compare_arms`` took
the arms' metrics as a second argument and a required ``seed``, which this script passes
when asked for.)
"""

from __future__ import annotations

import argparse
import inspect
import time

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.stats import metrics as metrics_module


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    spec = BenchSpec(
        workload="azure-conv",
        policies=["fcfs", "shortest-prompt"],
        rate_scale=4,
        slo_ttft_ms=2000,
        slo_tpot_ms=100,
    )
    bench = Bench(spec)
    runs = [bench.run_arm(i, spec.workload.rate_scale) for i in range(2)]
    for run, label in zip(runs, bench.labels, strict=True):
        run.policy = label
    try:
        from schedkit.bench.stats.compare import compare_arms
    except ImportError:  # an older tree: the comparison lived in metrics
        compare_arms = metrics_module.compare_arms
    parameters = inspect.signature(compare_arms).parameters
    second = list(parameters)[1]
    extra = [[bench.metrics(r) for r in runs]] if second == "metrics" else []
    seed = parameters.get("seed")
    required = {"seed": 0} if seed is not None and seed.default is inspect.Parameter.empty else {}
    best = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        out = compare_arms(runs, *extra, slo_ttft_ms=2000, slo_tpot_ms=100, **required)
        best = min(best, time.perf_counter() - started)
    rows = len(out[0]["metrics"])
    print(
        f"{len(runs[0].records)} requests per arm, {rows} compared metrics: {best:.3f} s (best of {args.repeat})"
    )


if __name__ == "__main__":
    main()
