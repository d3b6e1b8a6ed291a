"""Does schedkit's finish observer slow SGLang's steps? One process, the patch on and off.

Process-to-process noise on this machine (a step's forward 0.7x to 1.4x between two
engines run a minute apart, ``idle_cost.py --spread``) hides a 5% difference between
arms. Here every round is one engine under a policy with a finish observer (``observer``,
a no-op, or ``sjf``), and the timer plugin switches the adapter's ``stream_output`` patch
off and on every ``--block`` steps (``SCHEDKIT_BENCH_TOGGLE``): the steps with and
without it run in the same process, a few hundred milliseconds apart. Per round, an
ordinary least-squares fit of each step's time (the scheduler's work and the forward,
separately) on its batch size and whether it ran patched, over the decode steps (where
requests finish; the few prefill steps cost many times more and fall in blocks unevenly),
gives the patch's cost per step in milliseconds; the rounds' estimates are printed with
their median and range.

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/speed/sglang/finish_toggle.py \\
        --arm observer --rounds 6 --json benchmarks/speed/sglang/finish-toggle-observer.json
    (and --arm sjf --json benchmarks/speed/sglang/finish-toggle-sjf.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import overhead
from idle_cost import run_arm


def patch_cost(lines: list[dict[str, Any]], key: str) -> dict[str, float]:
    """``key``'s seconds per step ~ a + b * batch size + d * patched (least squares):
    ``d`` in ms, and as a share of the unpatched steps' mean; decode steps only."""
    steps = [s for s in lines if "patched" in s and not s["extend"]]
    y = np.array([s[key] for s in steps]) * 1e3
    patched = np.array([float(s["patched"]) for s in steps])
    x = np.column_stack([np.ones_like(y), [s["bs"] for s in steps], patched])
    (_, _, d), *_ = np.linalg.lstsq(x, y, rcond=None)
    base = float(y[patched == 0].mean())
    return {"ms": float(d), "share": float(d) / base, "unpatched_ms": base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", choices=("observer", "sjf", "sjf-oracle"), default="observer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--waves", type=int, default=16)
    parser.add_argument("--block", type=int, default=16, help="steps per on or off block")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = overhead.setup("schedkit-sglang-toggle-")
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        log = work / f"{args.arm}-{r}.jsonl"
        summary = run_arm(work / "model", args.arm, log, True, args.waves, args.block)
        lines = [s for s in map(json.loads, log.read_text().splitlines()) if "sched" in s]
        on = sum(1 for s in lines if s.get("patched"))
        rounds.append({
            "steps": len(lines), "patched_steps": on, "observed": summary["observed"],
            "sched": patch_cost(lines, "sched"), "forward": patch_cost(lines, "forward"),
        })  # fmt: skip
        print(f"round {r}: {json.dumps(rounds[-1])}")
        if args.json:
            args.json.write_text(json.dumps({"arm": args.arm, "block": args.block,
                                             "waves": args.waves, "rounds": rounds}, indent=1))  # fmt: skip
    print(f"{args.arm}, the patch's cost per step (median over {args.rounds} rounds, range):")
    for key in ("sched", "forward"):
        ms = [r[key]["ms"] for r in rounds]
        share = [100 * r[key]["share"] for r in rounds]
        print(
            f"  {key:<8} {statistics.median(ms):+.3f} ms ({min(ms):+.3f} to {max(ms):+.3f}),"
            f" {statistics.median(share):+.1f}% ({min(share):+.1f} to {max(share):+.1f})"
        )


if __name__ == "__main__":
    main()
