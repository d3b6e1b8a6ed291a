"""What a bench costs after its arms ran: statistics, comparison and every file it writes.

``make demo``'s A/B (azure-conv at 4x, fcfs against shortest-prompt: 2 x 19,366 requests)
is replayed once, untimed, and its arms pickled. Then each tree, this checkout and the
``--baseline`` checkout (an older commit in a git worktree), runs ``run_bench`` on those
arms in fresh interpreters (``PYTHONPATH`` set to the tree) with the replay taken out:
the arms' metrics (``compute_metrics``, which ``run_arms`` computes per arm), the
results (flags and comparisons), and the files (``write_outputs``: results.json,
requests.parquet, the vllm-bench files, report.md and report.html). Each process times
one cold call (its first: lazy imports included, as in the command) and then the best of
``--repeat`` warm ones; the trees take turns, ``--processes`` fresh processes each. Both
trees write with a fixed provenance and date, and the script checks that they wrote the
same bytes. The cycle collector runs once after the arms are loaded, as it has during
a replay. Pin it to one core::

    git worktree add /tmp/old-outputs <commit>
    taskset -c 1 .venv/bin/python benchmarks/speed/bench_outputs.py --baseline /tmp/old-outputs

``--profile`` prints a cProfile listing of one warm call on this tree instead.
"""

from __future__ import annotations

import argparse
import cProfile
import filecmp
import gc
import json
import os
import pickle
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
PHASES = ("metrics", "results", "files", "total")
DEMO = {
    "workload": "azure-conv",
    "policies": ["fcfs", "shortest-prompt"],
    "rate_scale": 4.0,
    "slo_ttft_ms": 2000.0,
    "slo_tpot_ms": 100.0,
}
PROVENANCE = {
    "schedkit_version": "0",
    "git_revision": None,
    "command": ["schedkit", "bench"],
    "python": "3",
    "numpy": "2",
    "platform": "bench",
    "created_utc": "2026-01-01T00:00:00+00:00",
}


class _FixedDate(datetime):
    """vllm-bench files' ``date``, the same in both trees' files."""

    @classmethod
    def now(cls, tz: Any = None) -> _FixedDate:
        return cls(2026, 1, 1)


def replay(path: Path) -> None:
    """Replay the demo's arms once and pickle them (with this tree's code)."""
    from schedkit.bench.runner import Bench, BenchSpec, run_arms

    bench = Bench(BenchSpec(**DEMO))
    runs, _ = run_arms(bench)
    path.write_bytes(pickle.dumps(runs))


def _timed(times: dict[str, float], phase: str, work: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return work(*args, **kwargs)
        finally:
            times[phase] = time.perf_counter() - started

    return call


def child(arms: Path, out: Path, repeat: int, profile: bool) -> None:
    """In a fresh interpreter on one tree: ``run_bench`` on the pickled arms, timed."""
    from schedkit.bench import runner
    from schedkit.bench.report import vllm_format

    runs = pickle.loads(arms.read_bytes())
    bench = runner.Bench(runner.BenchSpec(**DEMO))  # parsing the workload: not timed
    gc.collect()  # as after a replay, whose many allocations the collector has seen
    times: dict[str, float] = {}

    def run_arms(b: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        started = time.perf_counter()
        metrics = [b.metrics(run) for run in runs]  # what each arm's worker computes
        times["metrics"] = time.perf_counter() - started
        return runs, metrics

    runner.Bench = lambda spec: bench  # type: ignore[assignment,misc]
    runner.run_arms = run_arms  # type: ignore[assignment]
    runner.provenance = lambda spec: {**PROVENANCE, "spec": spec}  # type: ignore[attr-defined]
    runner._results = _timed(times, "results", runner._results)
    runner.write_outputs = _timed(times, "files", runner.write_outputs)  # type: ignore[attr-defined]
    vllm_format.datetime = _FixedDate  # type: ignore[attr-defined]

    def once() -> dict[str, float]:
        times.clear()
        started = time.perf_counter()
        runner.run_bench(bench.spec, out, overwrite=True)
        return {**times, "total": time.perf_counter() - started}

    if profile:
        once()
        profiler = cProfile.Profile()
        profiler.runcall(once)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        return
    cold = once()
    warm = [once() for _ in range(repeat)]
    print(json.dumps({"cold": cold, "warm": {p: min(w[p] for w in warm) for p in PHASES}}))


def _spawn(tree: Path, arms: Path, out: Path, repeat: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(HERE), "--child", str(arms), str(out), "--repeat", str(repeat)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, dict[str, float]] = json.loads(done.stdout.splitlines()[-1])
    return result


def same_files(a: Path, b: Path) -> list[str]:
    """The files that differ between two out folders (or are in one only)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    return [n for n in names if not filecmp.cmp(a / n, b / n, shallow=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    parser.add_argument("--repeat", type=int, default=5, help="warm calls per process")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per tree")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        arms, out = args.child
        child(arms, out, args.repeat, args.profile)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        arms = work / "arms.pickle"
        replay(arms)
        if args.profile:
            child(arms, work / "out", args.repeat, profile=True)
            return
        trees = {"new": ROOT} | ({"old": args.baseline.resolve()} if args.baseline else {})
        found: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
        for _ in range(args.processes):
            for name, tree in trees.items():
                found[name].append(_spawn(tree, arms, work / name, args.repeat))
        report(found, args)
        if args.baseline:
            differ = same_files(work / "old", work / "new")
            print(f"files written: {'identical' if not differ else 'DIFFERENT: ' + str(differ)}")
            if differ:
                sys.exit(1)


def report(found: dict[str, list[dict[str, dict[str, float]]]], args: argparse.Namespace) -> None:
    """Per phase, cold (median of the processes' first calls) and warm (their best)."""
    print(f"{args.processes} processes per tree, {args.repeat} warm calls each; seconds")
    print(f"| tree | when | {' | '.join(PHASES)} |")
    print("|---|---|" + "---:|" * len(PHASES))
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name, runs in found.items():
        cold = {p: statistics.median(r["cold"][p] for r in runs) for p in PHASES}
        warm = {p: min(r["warm"][p] for r in runs) for p in PHASES}
        summary[name] = {"cold": cold, "warm": warm}
        for when, values in (("cold", cold), ("warm", warm)):
            print(f"| {name} | {when} | " + " | ".join(f"{values[p]:.3f}" for p in PHASES) + " |")
    if "old" in summary:
        for when in ("cold", "warm"):
            ratios = [summary["new"][when][p] / summary["old"][when][p] for p in PHASES]
            print(f"| new/old | {when} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")


if __name__ == "__main__":
    main()
