"""slo's goodput against fcfs on loads its proof did not use (see slo.md, "Held out").

    python benchmarks/policies/slo_heldout.py

For each load, runs ``schedkit bench --goodput`` (DistServe's goodput: the highest rate
at which at least 90% of requests meet both SLOs, a rejection counting as a miss; the
search starts at ``--rate-scale 7``) with SLO 1 s TTFT / 50 ms TPOT, arms ``fcfs`` and
``slo-targets.toml`` (and each ``--extra`` config), on the simulator's defaults. The
loads: the proof's own (azure-conv's first 3,000 requests) and held-out windows of the
same trace (the trace's seconds), and azure-code's first 3,000 requests. Prints one row per
load: each arm's max goodput and its ratio to fcfs's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOADS = {
    "azure-conv first 3,000 (the proof's)": ["--workload", "azure-conv", "--max-requests", "3000"],
    "azure-conv 600-1,140 s": ["--workload", "azure-conv", "--window", "600:1140"],
    "azure-conv 1,200-1,740 s": ["--workload", "azure-conv", "--window", "1200:1740"],
    "azure-conv 1,800-2,340 s": ["--workload", "azure-conv", "--window", "1800:2340"],
    "azure-conv 2,400-2,940 s": ["--workload", "azure-conv", "--window", "2400:2940"],
    "azure-code first 3,000": ["--workload", "azure-code", "--max-requests", "3000"],
}


def goodput(load: list[str], policies: list[str], out: Path) -> list[float]:
    cmd = [sys.executable, "-m", "schedkit", "bench", *load, "--rate-scale", "7",
           "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--goodput", "--out", str(out),
           *(a for p in policies for a in ("--policy", p))]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    results = json.loads((out / "results.json").read_text())
    return [arm["metrics"]["goodput_rps"] for arm in results["arms"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", nargs="*", default=[], help="more slo configs to compare")
    args = parser.parse_args()
    policies = ["fcfs", "benchmarks/policies/slo-targets.toml", *args.extra]
    names = [Path(p).stem for p in policies]
    print("| load | " + " | ".join(f"{n} (req/s, x fcfs)" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, load) in enumerate(LOADS.items()):
            rates = goodput(load, policies, Path(tmp) / str(i))
            cells = [f"{r:.1f} ({r / rates[0]:.2f}x)" for r in rates]
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
