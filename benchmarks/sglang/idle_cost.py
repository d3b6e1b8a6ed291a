"""Does a policy cost SGLang's steps anything when nothing waits? (CPU build, tiny model.)

Each arm is its own ``sglang.Engine`` with ``record_steps`` on (as the fidelity loop's
arms are), fed four waves of 32 requests (32 prompt tokens, 64 output tokens) with up to
64 running, so every wave is admitted at once and no step has a waiting queue to order.
The ``schedkit_bench_timer`` plugin (``overhead.py``'s) times the scheduler's own work
and the forward per step. Arms run in a shuffled order every round; ratios are paired
within a round, against ``fcfs``.

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/sglang/idle_cost.py --rounds 7
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path
from typing import Any

import overhead  # puts the timer plugin and engine_util on sys.path
from engine_util import environ, prompt
from schedkit_sglang import cpu

ARMS = ("fcfs", "sjf", "priority")
WAVES, WAVE, OUTPUT = 4, 32, 64


def run_arm(model: Path, policy: str, log: Path) -> dict[str, float]:
    import sglang

    config = {"policy": policy, "record_steps": f"{log}.steps.csv"}
    env = {"SCHEDKIT_POLICY": None, "SCHEDKIT_CONFIG": json.dumps(config),
           "SCHEDKIT_BENCH_TIMER": str(log)}  # fmt: skip
    settings = {**cpu.ENGINE_ARGS, "skip_tokenizer_init": True, "log_level": "error",
                "max_total_tokens": 32768, "max_running_requests": 64}  # fmt: skip
    params = {"max_new_tokens": OUTPUT, "ignore_eos": True}
    with environ(env):
        llm = sglang.Engine(model_path=str(model), **settings)
    try:
        llm.generate(input_ids=[prompt(i, 32) for i in range(8)], sampling_params=params)
        log.write_text("")  # the warm-up is not counted
        for wave in range(WAVES):
            ids = [prompt(1000 + wave * WAVE + i, 32) for i in range(WAVE)]
            llm.generate(input_ids=ids, sampling_params=params)
    finally:
        llm.shutdown()
    steps = [line for line in map(json.loads, log.read_text().splitlines()) if "sched" in line]
    return {
        "steps": len(steps),
        "sched_ms": 1e3 * statistics.fmean(s["sched"] for s in steps),
        "forward_ms": 1e3 * statistics.fmean(s["forward"] for s in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    work = overhead.setup("schedkit-sglang-idle-")
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    rng, order = random.Random(0), list(ARMS)
    for r in range(args.rounds):
        rng.shuffle(order)
        for arm in order:
            results[arm].append(run_arm(work / "model", arm, work / f"{arm}-{r}.jsonl"))
    print(f"{'arm':<10} {'sched ms':>9} {'ratio':>7} {'forward ms':>11} {'ratio':>7} steps")
    for arm, rounds in results.items():
        cells = []
        for key in ("sched_ms", "forward_ms"):
            ratio = statistics.median(
                a[key] / b[key] for a, b in zip(rounds, results["fcfs"], strict=True)
            )
            cells.append(f"{statistics.median(x[key] for x in rounds):>9.3f} {ratio:>6.3f}x")
        print(f"{arm:<10} {cells[0]} {cells[1]:>19} {rounds[0]['steps']}")


if __name__ == "__main__":
    main()
