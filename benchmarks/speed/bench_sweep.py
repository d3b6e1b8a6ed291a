"""How long a 1,000-point load sweep takes on this machine (issue #14's speed target).

5 policies x 4 engine configs x 10 rates x 5 seeded replicates = 1,000 probe points,
each a replay of the first 2,000 azure-conv requests on the simulator, in parallel
processes (one per core)::

    python benchmarks/speed/bench_sweep.py [--jobs N] [--out DIR]

The same sweep from the command line::

    schedkit bench --workload azure-conv --max-requests 2000 --arrivals poisson \\
        --replicates 5 --rate-scale 0.5,1,1.5,2,2.5,3,3.5,4,4.5,5 \\
        --arm policy=fcfs,max_num_seqs=256 ... (20 arms) --out DIR

Prints the wall time, the points per second, and the share of time outside replays.
Target: at most 300 s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from schedkit.bench.arms import ArmSpec, EngineSettings
from schedkit.bench.runner import BenchSpec
from schedkit.bench.sweep.run import run_sweep
from schedkit.bench.sweep.spec import SweepSpec

POLICIES = ("fcfs", "shortest-prompt", "sjf", "vtc", "lcf")
CONFIGS = (
    {"max_num_seqs": 256},
    {"max_num_seqs": 128},
    {"max_num_seqs": 64},
    {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
)
RATES = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
LIMIT_S = 300.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    arms = [
        ArmSpec(name=f"{p}-{i}", policy=p, engine=EngineSettings(**c))
        for p in POLICIES
        for i, c in enumerate(CONFIGS)
    ]
    spec = SweepSpec(
        bench=BenchSpec(workload="azure-conv", max_requests=2000, arms=arms, jobs=args.jobs,
                        slo_ttft_ms=2000.0, slo_tpot_ms=100.0),
        rate_scales=RATES, replicates=5, arrivals="poisson",
    )  # fmt: skip
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    done = [0]

    def progress(n: int, total: int, arms_done: int, arms: int) -> None:
        done[0] = n

    started = time.perf_counter()
    results = run_sweep(spec, out, progress)
    wall = time.perf_counter() - started
    points = len(results["points"])
    print(f"{points:,} probe points ({len(arms)} arms x {len(RATES)} rates x 5 replicates)")
    print(f"wall {wall:.1f} s, {points / wall:.2f} points/s, target <= {LIMIT_S:.0f} s:"
          f" {'met' if wall <= LIMIT_S else 'NOT met'}")  # fmt: skip
    knees = {a["arm"]: a["knee_rps"] for a in results["arms"]}
    print(
        "knees (req/s):", ", ".join(f"{k}={v:.1f}" if v else f"{k}=none" for k, v in knees.items())
    )
    print(f"results in {out}")


if __name__ == "__main__":
    main()
