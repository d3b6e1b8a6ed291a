"""The simulator at load, side by side with a baseline checkout (issue #40's table).

    git worktree add /tmp/before-40 b3bcb4e
    python benchmarks/speed/bench_load.py --baseline /tmp/before-40 [--rounds 3]

Each figure is measured on this tree and on ``--baseline`` in the same run, taking turns,
in fresh interpreters (``PYTHONPATH`` picks the tree; this folder's ``bench_sim.py`` times
the replays of both, through the engine's public entry points):

- one demo arm (azure-conv at 4x), mooncake-conv's first 2,000, the high-load growth
  stream and the whole mooncake-conv trace: ``bench_sim.py`` pinned to one core;
- ``make demo``'s command, end to end, warm (its arms run on both cores);
- the README's ``schedkit plan`` example, end to end, on both cores;
- peak memory (max RSS) of a 1M-request replay (a steady Poisson stream).

Targets: demo arm >= 20,000 req/s; mooncake 2,000 >= 10,000 req/s; growth <= 10.5x;
make demo <= 3 s; plan <= 15 s; 1M replay <= 2 GB.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEMO = [
    "bench",
    "--workload",
    "azure-conv",
    "--policy",
    "fcfs",
    "--policy",
    "shortest-prompt",
    "--rate-scale",
    "4",
    "--slo-ttft-ms",
    "2000",
    "--slo-tpot-ms",
    "100",
    "--overwrite",
]
PLAN = ["plan", "--workload", "azure-conv", "--rate-scale", "8", "--model", "Qwen2.5-14B",
        "--gpu", "H100-SXM,A100-80GB", "--tp", "1,2", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "100", "--price", "H100-SXM=3.0", "--price", "A100-80GB=1.8",
        "--overwrite"]  # fmt: skip
MILLION = """
import resource, time
from schedkit.bench.runner import Bench, BenchSpec
bench = Bench(BenchSpec(workload="poisson:rate=5.5,n=1000000,prompt=1024,output=200",
                        policies=["fcfs"]))
started = time.perf_counter()
run = bench.run_arm(0, 1.0)
wall = time.perf_counter() - started
done = sum(r.finish_reason == "length" for r in run.records)
print(f"{done} {wall:.1f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f}")
"""


def env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}


def run(tree: Path, argv: list[str], *, core: str | None = None) -> str:
    """``python argv`` on ``tree``'s schedkit (pinned to ``core`` if given), from a folder
    holding no checkout (``-m`` and ``-c`` put the current folder first on the path)."""
    prefix = ["taskset", "-c", core] if core is not None else []
    done = subprocess.run(
        [*prefix, sys.executable, *argv], env=env(tree), capture_output=True, text=True,
        check=True, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    return done.stdout


def sim_figures(tree: Path, rounds: int, core: str) -> dict[str, str]:
    """bench_sim.py's figures for ``tree``: requests/s, growth, us per request."""
    script = str(HERE / "bench_sim.py")
    out = run(tree, [script, "--only", "demo", "mooncake", "--repeat", str(rounds)], core=core)
    rates = re.findall(r"^([\d,]+) requests/s", out, re.M)
    out += run(tree, [script, "--only", "growth-load", "mooncake-full", "--repeat", "1"], core=core)
    growth = re.search(r"time\(100k\) / time\(10k\) = ([\d.]+)", out)
    full = re.findall(r"^mooncake-conv (\d+)% .* ([\d.]+) us/req$", out, re.M)
    return {
        "demo arm (azure-conv x4), req/s": rates[0],
        "mooncake-conv first 2,000, req/s": rates[1],
        "growth 10k -> 100k at high load (poisson rate 30)": f"{growth.group(1)}x" if growth else "?",
        **{f"mooncake-conv whole trace, {p}%: us/req": us for p, us in full},
    }  # fmt: skip


def wall(tree: Path, argv: list[str], out: Path) -> float:
    started = time.perf_counter()
    run(tree, ["-m", "schedkit", *argv, "--out", str(out)])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", default="0", help="the core the replays are pinned to")
    args = parser.parse_args()
    trees = {"this tree": ROOT, "baseline": args.baseline.resolve()}
    rows: dict[str, dict[str, str]] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree in trees.items():
            rows[name].update(sim_figures(tree, args.rounds, args.core))
            wall(tree, DEMO, Path(tmp) / "warm")  # warm the caches: make demo's "warm"
        demo: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                demo[name].append(wall(tree, DEMO, Path(tmp) / "demo"))
        for name, tree in trees.items():
            rows[name]["make demo's command, wall s (best; worst)"] = (
                f"{min(demo[name]):.2f}; {max(demo[name]):.2f}"
            )
            rows[name]["README plan example, wall s"] = (
                f"{wall(tree, PLAN, Path(tmp) / 'plan'):.1f}"
            )
            finished, seconds, gib = run(tree, ["-c", MILLION]).split()
            rows[name]["1M-request replay: requests finished"] = finished
            rows[name]["1M-request replay: max RSS GiB (replay s)"] = f"{gib} ({seconds})"
    print(f"| figure | {' | '.join(trees)} |\n|---|{'---|' * len(trees)}")
    for key in rows["this tree"]:
        print(f"| {key} | {' | '.join(rows[n].get(key, '?') for n in trees)} |")


if __name__ == "__main__":
    main()
