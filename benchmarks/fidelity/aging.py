"""Does an engine's step slow down as the engine ages? One long run, its steps by time window.

``same_engine.py`` on SGLang CPU found the held-out steps predicted at 0.93 of their
measured time: decode steps later in a run took longer than a profile fitted on its
start said, and prefill steps did not. This replays ``--copies`` copies of a test trace
back to back in one engine under plain ``fcfs`` (no policy hook runs), records its steps,
fits a profile on the first window's steps and prints measured / predicted step time
per window and step kind. A flat row: the engine keeps its speed. ``--no-prefix-caching``
runs the same without the prefix cache (SGLang's radix cache; vLLM's block cache).

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/aging.py \\
        --engine sglang --rate-scale 0.4 --json benchmarks/fidelity/aging-sglang.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

from loop import TESTS, WARMUP, engine_model
from same_engine import segmented_trace

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.sim.cost.calibration import read_steps
from schedkit.sim.cost.fit import StepRow, fit_steps, step_kind, with_gaps
from schedkit.sim.cost.model import RooflineCostModel


def drift(rows: list[StepRow], windows: int, reference: RooflineCostModel) -> dict[str, Any]:
    """A profile fitted on the first window's steps; measured / predicted time per window
    and step kind."""
    t0, t1 = rows[0].start_s or 0.0, rows[-1].end_s or 0.0
    bounds = [t0 + (t1 - t0) * w / windows for w in range(windows + 1)]
    by_window = [[r for r in rows if lo <= (r.start_s or 0.0) < hi]
                 for lo, hi in itertools.pairwise(bounds)]  # fmt: skip
    model = fit_steps(by_window[0], reference).model
    out: dict[str, Any] = {"window_s": (t1 - t0) / windows, "kinds": {}}
    for kind in sorted({step_kind(r) for r in rows}):
        ratios = []
        for steps in by_window:
            mine = [r for r in steps if step_kind(r) == kind]
            predicted = sum(model.step_time(r.prefill_tokens, r.decode_tokens, r.kv_tokens,
                                            r.attn_pairs) for r in mine)  # fmt: skip
            ratios.append(sum(r.seconds for r in mine) / predicted if predicted else None)
        out["kinds"][kind] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="sglang")
    parser.add_argument("--test", choices=sorted(TESTS), default="queued")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--random", default="mid")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="aging-"))
    model, reference = engine_model(out, None, args.random, "H100-SXM")
    workload, settings = TESTS[args.test]
    real = {"vllm": {"gpu_memory_utilization": 0.5}, "sglang": {}}[args.engine]
    common = {"engine": args.engine, "model": model, **real}
    run_bench(BenchSpec(workload=WARMUP, policies=["fcfs"], **common), out / "warmup")
    trace = out / "trace.jsonl"
    segmented_trace(workload, args.rate_scale, ["fcfs"] * args.copies, 0.0, trace)
    spec = BenchSpec(workload=str(trace), policies=["fcfs"], record_steps=str(out / "steps"),
                     prefix_caching=not args.no_prefix_caching, **settings, **common)  # fmt: skip
    run_bench(spec, out / "run")
    rows = with_gaps(read_steps(out / "steps" / "fcfs.csv")[0])[0]
    report = {"engine": args.engine, "test": args.test, "copies": args.copies,
              "rate_scale": args.rate_scale, "prefix_caching": not args.no_prefix_caching,
              "steps": len(rows), **drift(rows, args.windows, reference)}  # fmt: skip
    print(f"{args.engine}, prefix caching {'off' if args.no_prefix_caching else 'on'},"
          f" {len(rows)} steps, windows of {report['window_s']:.0f} s; measured / predicted"
          " (a profile fitted on window 0):")  # fmt: skip
    for kind, ratios in report["kinds"].items():
        print(f"  {kind:<8}" + " ".join("   -  " if r is None else f"{r:6.3f}" for r in ratios))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
