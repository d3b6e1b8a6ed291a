"""Why is sjf slower than fcfs on SGLang where nothing waits? (issue #15's open gap.)

The fidelity loop's SGLang runs show the real sjf arm behind fcfs on TPOT in the tests
whose simulated queue is empty (``same-rate``), where the simulator finds no difference.
This replays that test on the real engine with four arms, in a rotated order every round:

- ``fcfs``: no ordering hook;
- ``priority``: orders the queue (SGLang's ``calc_priority`` patched), but with every
  request at the same priority the order stays first come, first served;
- ``sjf``: as the loop runs it (learned predictor, finish observer);
- ``sjf-oracle``: sjf ordering by ``max_tokens``, so it learns nothing from finishes.

Per arm it reads the recorded steps: how many steps of each kind, the decode batch,
the share of time between steps, and the time per step against a profile fitted on the
same round's fcfs steps (below 1: this arm's steps ran longer for the same work). If
sjf's steps are the same steps run slower, the gap is in the step; if they are other
steps (more prefill steps, smaller decode batches), it is the schedule.

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/sjf_gap.py \\
        --rate-scale 0.16 --json benchmarks/fidelity/sjf-gap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from loop import TESTS, WARMUP, engine_model, metrics, step_bias

from schedkit.bench.arms import ArmSpec
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.sim.cost.calibration import read_steps
from schedkit.sim.cost.fit import StepRow, fit_steps, step_kind, with_gaps

CONFIGS = {
    "fcfs": {"policy": "fcfs"},
    "priority": {"policy": "priority"},
    "sjf": {"policy": "sjf"},
    "sjf-oracle": {"policy": "sjf", "options": {"sjf": {"predictor": "oracle"}}},
}
ARMS = tuple(CONFIGS)


def shape(rows: list[StepRow]) -> dict[str, float]:
    """The schedule the steps show: counts per kind, decode batch, gaps, busy time."""
    gapped, gaps = with_gaps(rows)
    decode = [r.decode_tokens for r in rows if step_kind(r) == "decode"]
    prefill = [r.prefill_tokens for r in rows if step_kind(r) != "decode"]
    return {
        "steps": len(rows),
        "prefill_steps": len(prefill),
        "prefill_tokens_per_step": statistics.fmean(prefill) if prefill else 0.0,
        "decode_batch": statistics.fmean(decode) if decode else 0.0,
        "busy_s": sum(r.seconds for r in rows),
        "gap_share": gaps,
        "with_gaps_s": sum(r.seconds for r in gapped),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test", choices=sorted(TESTS), default="same-rate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--random", default="mid")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--max-requests", type=int, default=None, help="a shorter run")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sjf-gap-"))
    model, reference = engine_model(out, None, args.random, "H100-SXM")
    workload, settings = TESTS[args.test]
    common = {
        "engine": "sglang",
        "model": model,
        "rate_scale": args.rate_scale,
        "max_requests": args.max_requests,
        **settings,
    }
    run_bench(BenchSpec(workload=WARMUP, policies=["fcfs"], **common), out / "warmup")
    for arm, config in CONFIGS.items():
        (out / f"{arm}.json").write_text(json.dumps(config))
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        order = list(ARMS[i % len(ARMS) :] + ARMS[: i % len(ARMS)])
        arms = [ArmSpec(name=a, policy=str(out / f"{a}.json")) for a in order]
        recorded = out / f"steps-{i}"
        result = run_bench(
            BenchSpec(workload=workload, arms=arms, record_steps=str(recorded), **common),
            out / f"real-{i}",
        )
        latency = metrics(result)
        steps = {a: read_steps(recorded / f"{a}.csv")[0] for a in order}
        base = fit_steps(with_gaps(steps["fcfs"])[0], reference).model
        rounds.append({
            "order": order,
            "arms": {
                a: {**latency[a], **shape(steps[a]),
                    "vs_fcfs_profile": step_bias(base, with_gaps(steps[a])[0])["time_ratio"]}
                for a in order
            },
        })  # fmt: skip
        print(f"round {i} ({', '.join(order)})")
        for a in ARMS:
            print(
                f"  {a:<11}", json.dumps({k: round(v, 4) for k, v in rounds[-1]["arms"][a].items()})
            )
        if args.json:
            args.json.write_text(json.dumps({"test": args.test, "workload": workload,
                                             "rate_scale": args.rate_scale, "rounds": rounds}, indent=2))  # fmt: skip
    print(table(rounds))


def table(rounds: list[dict[str, Any]]) -> str:
    """Per arm: medians over rounds, and the paired ratio to fcfs in the same round."""
    keys = ("tpot_ms_p50", "tpot_ms_p90", "ttft_ms_p50", "steps", "prefill_steps",
            "decode_batch", "busy_s", "gap_share", "vs_fcfs_profile")  # fmt: skip
    lines = ["| arm | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for arm in ARMS:
        cells = []
        for k in keys:
            med = statistics.median(r["arms"][arm][k] for r in rounds)
            if arm == "fcfs" or k in ("gap_share", "vs_fcfs_profile"):
                cells.append(f"{med:.4g}")
                continue
            ratio = statistics.median(
                r["arms"][arm][k] / r["arms"]["fcfs"][k] for r in rounds if r["arms"]["fcfs"][k]
            )
            cells.append(f"{med:.4g} ({ratio:.3f}x)")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
