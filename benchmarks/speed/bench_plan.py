"""How long the README's ``schedkit plan`` takes, this tree against an older one.

The command (azure-conv at 8x, Qwen2.5-14B, H100-SXM and A100-80GB at TP 1 and 2, the
README's SLOs and prices: 4 candidates, 24 probes) runs as a user runs it, a fresh
``python -m schedkit plan`` process per run with ``PYTHONPATH`` set to the tree, on both
cores unless ``--cpus`` says otherwise. Each round runs every mode once, their order
rotating from round to round:

- ``old``: the ``--baseline`` checkout (a git worktree of the commit before the change);
- ``new``: this tree;
- with ``--attribute``, also ``new --no-early-stop`` (every probe run to its end, in
  parallel) and ``new --jobs 1`` (probes stopped early, one at a time in one process);
- with ``--disagg``, also ``new --disagg``: the plan with disaggregated candidates (issue
  #42), checked to give the old tree's aggregated candidates, and its choice printed.

It reports each run's wall time and CPU time (the process and its workers), the medians,
and each round's ratio to ``old``, with the machine's load average before and after (a
shared machine's other work shows there). It then checks that the trees agree: the same
answer, the same candidates in the same order with the same outcomes, the same probes,
every figure equal where both measured it, and a probe this tree stopped early below the
target in the old tree's full run too, within the bounds it reported. ::

    git worktree add /tmp/old-plan <commit>
    .venv/bin/python benchmarks/speed/bench_plan.py --baseline /tmp/old-plan --rounds 3

``--profile`` prints a cProfile listing of the plan in this process instead (this tree,
``--jobs 1``, so the probes are profiled too).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
PLAN = [
    "plan", "--workload", "azure-conv", "--rate-scale", "8", "--model", "Qwen2.5-14B",
    "--gpu", "H100-SXM,A100-80GB", "--tp", "1,2", "--slo-ttft-ms", "2000",
    "--slo-tpot-ms", "100", "--price", "H100-SXM=3.0", "--price", "A100-80GB=1.8",
]  # fmt: skip
MODES: dict[str, list[str]] = {
    "new": [],
    "new --no-early-stop": ["--no-early-stop"],
    "new --jobs 1": ["--jobs", "1"],
    "new --disagg": ["--disagg"],
}
FIGURES = ("slo_attainment", "ttft_p90_ms", "tpot_p90_ms", "e2e_mean_ms", "throughput_tok_s")


def run(tree: Path, flags: list[str], out: Path, cpus: str | None) -> tuple[float, float]:
    """One plan in a fresh process: its wall and CPU seconds (workers included)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    pin = ["taskset", "-c", cpus] if cpus else []
    command = [*pin, sys.executable, "-m", "schedkit", *PLAN, *flags, "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(  # run from the tree: ``-m`` puts the working directory first
        command, cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How ``new``'s plan.json differs from ``old``'s beyond what stopping early allows."""
    found = []
    strip = {"meets", "stopped_early"}
    target = old["attainment"]
    if [c.get("outcome") for c in old["candidates"]] != [
        c.get("outcome") for c in new["candidates"]
    ]:
        found.append("the candidates' order or outcomes")
    for a, b in zip(old["candidates"], new["candidates"], strict=False):
        name = f"{b['gpu']} tp={b['tp']}"
        if {k: v for k, v in a.items() if k != "probes"} != {
            k: v for k, v in b.items() if k != "probes"
        }:
            found.append(f"{name}: its figures at its size")
        if [p["replicas"] for p in a["probes"]] != [p["replicas"] for p in b["probes"]]:
            found.append(f"{name}: the probes")
            continue
        for p, q in zip(a["probes"], b["probes"], strict=True):
            stopped = q.get("stopped_early")
            if stopped and p.get("stopped_early"):  # both stopped below the target
                continue
            if not stopped:
                if p != {k: v for k, v in q.items() if k not in strip}:
                    found.append(f"{name} x{p['replicas']}: its figures")
            elif not (
                stopped["slo_attainment_at_least"]
                <= p["slo_attainment"]
                <= stopped["slo_attainment_at_most"]
                < target
            ):
                found.append(f"{name} x{p['replicas']}: stopped outside its bounds")
    answers = [
        (b or {}).get(k) for b in (old["best"], new["best"]) for k in ("gpu", "tp", "replicas")
    ]
    if answers[:3] != answers[3:]:
        found.append("the answer")
    return found


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(args: argparse.Namespace) -> None:
    modes: dict[str, tuple[Path, list[str]]] = {"old": (args.baseline, [])}
    for name, flags in MODES.items():
        disagg = "--disagg" in flags
        if name == "new" or (args.attribute and not disagg) or (args.disagg and disagg):
            modes[name] = (ROOT, flags)
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    print(f"load average before: {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        outs = {m: Path(tmp) / m.replace(" ", "_") for m in modes}
        names = list(modes)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for m in order:
                tree, flags = modes[m]
                shutil.rmtree(outs[m], ignore_errors=True)
                times[m].append(run(tree, flags, outs[m], args.cpus))
                print(f"round {r + 1}: {m}: {times[m][-1][0]:.2f} s wall, {times[m][-1][1]:.2f} s CPU",
                      flush=True)  # fmt: skip
        print(f"load average after: {_load()}")
        report(times)
        old = json.loads((outs["old"] / "plan.json").read_text())
        for m in names[1:]:
            new = json.loads((outs[m] / "plan.json").read_text())
            if new.get("disagg"):  # its aggregated candidates, and what it chose
                print(f"{m}: chose {new['best'] and candidate(new['best'])}")
                new = {**new, "candidates": [c for c in new["candidates"] if "pool_tps" not in c]}
                found = [
                    f for f in differences(old, new) if f != "the candidates' order or outcomes"
                ]
            else:
                found = differences(old, new)
            print(f"{m} against old: {'; '.join(found) if found else 'the same plan'}")


def candidate(c: dict[str, Any]) -> str:
    if "pool_tps" in c:
        (p, tp_p), (d, tp_d) = c["disaggregated"]["prefill"], c["disaggregated"]["decode"]
        return f"{c['gpu']} {p} prefill tp={tp_p} + {d} decode tp={tp_d}, {c['gpus']} GPUs"
    return f"{c['gpu']} tp={c['tp']} x {c['replicas']}, {c['gpus']} GPUs"


def report(times: dict[str, list[tuple[float, float]]]) -> None:
    old = times["old"]
    print("\n| mode | wall (median) | CPU (median) | wall / old, by round | CPU / old |")
    print("|---|---:|---:|---|---:|")
    for m, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ratios = [w / o for (w, _), (o, _) in zip(runs, old, strict=True)]
        cpu_ratio = cpu / statistics.median(c for _, c in old)
        print(f"| {m} | {wall:.2f} s | {cpu:.2f} s | "
              f"{statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)}) | "
              f"{cpu_ratio:.2f}x |")  # fmt: skip


def profile() -> None:
    sys.path.insert(0, str(ROOT))
    from schedkit.bench.plan import PlanSpec, run_plan
    from schedkit.bench.spec import BenchSpec

    bench = BenchSpec(
        workload="azure-conv", policies=["fcfs"], model="Qwen2.5-14B", rate_scale=8.0,
        slo_ttft_ms=2000.0, slo_tpot_ms=100.0, jobs=1,
    )  # fmt: skip
    plan = PlanSpec(
        bench=bench, gpus=["H100-SXM", "A100-80GB"], tps=[1, 2],
        prices={"H100-SXM": 3.0, "A100-80GB": 1.8},
    )  # fmt: skip
    profiler = cProfile.Profile()
    profiler.runcall(run_plan, plan)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attribute", action="store_true", help="also --no-early-stop, --jobs 1")
    parser.add_argument("--disagg", action="store_true", help="also the plan with --disagg")
    parser.add_argument("--cpus", help="taskset's CPU list for the plans (default: all)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        profile()
    elif args.baseline is None:
        parser.error("give --baseline (a worktree of the commit to compare with), or --profile")
    else:
        measure(args)


if __name__ == "__main__":
    main()
