"""Does a policy cost SGLang's steps anything when nothing waits? (CPU build, tiny model.)

Each arm is its own ``sglang.Engine`` with ``record_steps`` on (as the fidelity loop's
arms are), fed four waves of 32 requests (32 prompt tokens, 64 output tokens) with up to
64 running, so every wave is admitted at once and no step has a waiting queue to order.
With ``--spread`` the outputs run from 8 to 64 tokens, so requests finish in most steps
(as in a replay) instead of all in a wave's last one; that is where a finish observer
would cost something.
The ``schedkit_bench_timer`` plugin (``overhead.py``'s) times the scheduler's own work
and the forward per step. Arms run in a shuffled order every round; ratios are paired
within a round, against ``fcfs``.

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/speed/sglang/idle_cost.py --rounds 7
    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/speed/sglang/idle_cost.py \\
        --spread --arm fcfs --arm sjf --arm sjf-oracle --arm observer --arm priority --rounds 9

Arms: ``fcfs`` (no hook), ``priority`` (orders the queue: all equal, so FCFS order),
``sjf`` (orders; learns from finishes), ``sjf-oracle`` (orders by ``max_tokens``; its
finish observer does nothing) and ``observer`` (``bench-finish-observer`` from the
timer's site: the finish observer alone).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path
from typing import Any

import overhead  # puts the timer plugin on sys.path
from overhead import environ, prompt
from schedkit_sglang import cpu

CONFIGS: dict[str, dict[str, Any]] = {
    "fcfs": {"policy": "fcfs"},
    "sjf": {"policy": "sjf"},
    "priority": {"policy": "priority"},
    "sjf-oracle": {"policy": "sjf", "options": {"sjf": {"predictor": "oracle"}}},
    "observer": {"policy": "bench-finish-observer"},
}
DEFAULT_ARMS = ("fcfs", "sjf", "priority")
WAVES, WAVE, OUTPUT = 4, 32, 64


def outputs(spread: bool) -> list[int]:
    """Each wave's output lengths: all ``OUTPUT``, or 8 to ``OUTPUT`` in an order that
    mixes long and short."""
    if not spread:
        return [OUTPUT] * WAVE
    return [8 + (i * 23) % (OUTPUT - 7) for i in range(WAVE)]


def run_arm(
    model: Path, arm: str, log: Path, spread: bool, waves: int = WAVES, toggle: int = 0
) -> dict[str, float]:
    """One engine under ``arm``: a warm-up, then ``waves`` waves; the timer's step lines
    are in ``log``. ``toggle``: the timer switches the finish patch every that many
    steps (``finish_toggle.py``)."""
    import sglang

    config = {**CONFIGS[arm], "record_steps": f"{log}.steps.csv"}
    env = {"SCHEDKIT_POLICY": None, "SCHEDKIT_CONFIG": json.dumps(config),
           "SCHEDKIT_BENCH_TIMER": str(log), "SCHEDKIT_BENCH_TOGGLE": str(toggle) if toggle else None}  # fmt: skip
    settings = {**cpu.ENGINE_ARGS, "skip_tokenizer_init": True, "log_level": "error",
                "max_total_tokens": 32768, "max_running_requests": 64}  # fmt: skip
    params = {"max_new_tokens": OUTPUT, "ignore_eos": True}
    with environ(env):
        llm = sglang.Engine(model_path=str(model), **settings)
    try:
        llm.generate(input_ids=[prompt(i, 32) for i in range(8)], sampling_params=params)
        log.write_text("")  # the warm-up is not counted
        for wave in range(waves):
            ids = [prompt(1000 + wave * WAVE + i, 32) for i in range(WAVE)]
            each = [{**params, "max_new_tokens": n} for n in outputs(spread)]
            llm.generate(input_ids=ids, sampling_params=each)
        state = llm.get_server_info()["internal_states"][0].get("schedkit") or {}
    finally:
        llm.shutdown()
    steps = [line for line in map(json.loads, log.read_text().splitlines()) if "sched" in line]
    return {
        # requests the finish observer saw: all (8 + 32 a wave) where the arm has one
        "observed": sum(state.get("finished", {}).values()),
        "steps": len(steps),
        "sched_ms": 1e3 * statistics.fmean(s["sched"] for s in steps),
        "forward_ms": 1e3 * statistics.fmean(s["forward"] for s in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--arm", action="append", choices=sorted(CONFIGS), default=None)
    parser.add_argument("--spread", action="store_true", help="outputs of 8 to 64 tokens")
    parser.add_argument("--json", type=Path, default=None, help="every round's figures")
    args = parser.parse_args()
    arms = tuple(args.arm or DEFAULT_ARMS)
    if "fcfs" not in arms:
        parser.error("the arms need fcfs: every ratio is against it")
    work = overhead.setup("schedkit-sglang-idle-")
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    rng, order = random.Random(0), list(arms)
    for r in range(args.rounds):
        rng.shuffle(order)
        for arm in order:
            log = work / f"{arm}-{r}.jsonl"
            results[arm].append(run_arm(work / "model", arm, log, args.spread))
        if args.json:
            args.json.write_text(json.dumps({"spread": args.spread, "rounds": results}, indent=1))
    print(
        f"{'arm':<10} {'sched ms':>9} {'ratio':>7} {'forward ms':>11} {'ratio':>7} steps observed"
    )
    for arm, rounds in results.items():
        cells = []
        for key in ("sched_ms", "forward_ms"):
            ratio = statistics.median(
                a[key] / b[key] for a, b in zip(rounds, results["fcfs"], strict=True)
            )
            cells.append(f"{statistics.median(x[key] for x in rounds):>9.3f} {ratio:>6.3f}x")
        print(f"{arm:<10} {cells[0]} {cells[1]:>19} {rounds[0]['steps']} {rounds[0]['observed']}")


if __name__ == "__main__":
    main()
