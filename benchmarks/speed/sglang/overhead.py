"""schedkit-sglang's cost inside the real SGLang scheduler (CPU build, tiny random model).

Two measurements, each arm its own ``sglang.Engine`` fed the identical workload, arms in
a shuffled order every round:

1. ``step``: the scheduler's own work per step (``ingest_requests`` +
   ``get_next_batch_to_run`` + ``process_batch_result``, the model forward excluded),
   stock SGLang vs the default policy (``fcfs``: no hooks) vs ``fcfs-record`` (``fcfs``
   with ``record_steps``: the step patches and a CSV row per step) vs ``priority``
   (ordering and victims). The forward is reported too: ``run_batch`` is where a step's
   report is opened. 384 requests of 32 prompt tokens and 32 output tokens, 64 running at most.
2. ``order``: one ``SchedulePolicy.calc_priority`` call (what orders the waiting queue)
   by queue length, SGLang's ``lpm`` vs schedkit ``priority`` and ``shortest-prompt``
   (which replace it). A burst of 400 one-token requests, 4 running at most, so the
   queue drains from 400 through 128.

Timing comes from the ``schedkit_bench_timer`` SGLang plugin in ``site/`` (installed for
the run by putting ``site`` on PYTHONPATH), which wraps those methods outermost.

    HF_HUB_OFFLINE=1 .venv-sglang/bin/python benchmarks/speed/sglang/overhead.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The timer plugin: spawned SGLang processes take sys.path from this one.
sys.path.append(str(HERE / "site"))

from schedkit_sglang import cpu  # noqa: E402
from schedkit_sglang.config import scoped_environ as environ  # noqa: E402

from schedkit.testing.models import tiny_llama  # noqa: E402

STEP_ARMS = {"stock": None, "fcfs": "fcfs", "fcfs-record": "fcfs+record", "priority": "priority"}
ORDER_ARMS = {"lpm": None, "priority": "priority", "shortest-prompt": "shortest-prompt"}
BUCKETS = ((64, 128), (129, 256), (257, 400))


def prompt(i: int, length: int) -> list[int]:
    """A prompt of ``length`` token ids, distinct for each ``i``."""
    return [(i * 131 + j * 7) % 2000 + 1 for j in range(length)]


def run_arm(model: Path, policy: str | None, kind: str, log: Path) -> list[dict[str, Any]]:
    import sglang

    env = {
        "SCHEDKIT_POLICY": policy,
        "SCHEDKIT_CONFIG": None,
        "SCHEDKIT_BENCH_TIMER": str(log),
    }
    if policy is not None and policy.endswith("+record"):  # record_steps: a config
        config = {"policy": policy.removesuffix("+record"), "record_steps": f"{log}.steps.csv"}
        env.update(SCHEDKIT_POLICY=None, SCHEDKIT_CONFIG=json.dumps(config))
    settings: dict[str, Any] = {
        **cpu.ENGINE_ARGS,
        "skip_tokenizer_init": True,
        "log_level": "error",
        "max_total_tokens": 32768,
    }
    if kind == "step":
        settings["max_running_requests"] = 64
        ids = [prompt(i, 32) for i in range(384)]
        params = {"max_new_tokens": 32, "ignore_eos": True}
    else:
        settings["max_running_requests"] = 4
        settings["schedule_policy"] = "lpm"
        rng = random.Random(0)
        ids = [prompt(i, rng.randint(8, 24)) for i in range(400)]
        params = {"max_new_tokens": 1, "ignore_eos": True}
    with environ(env):
        llm = sglang.Engine(model_path=str(model), **settings)
    try:
        llm.generate(input_ids=ids[:8], sampling_params=params)  # warm-up, not logged
        log.write_text("")
        llm.generate(input_ids=ids, sampling_params=params)
    finally:
        llm.shutdown()
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def step_figures(lines: list[dict[str, Any]]) -> dict[str, float]:
    steps = [line for line in lines if "sched" in line]
    sched = [line["sched"] for line in steps]
    forward = [line["forward"] for line in steps]
    return {
        "steps": len(steps),
        "sched_ms": 1e3 * statistics.fmean(sched),
        "sched_median_ms": 1e3 * statistics.median(sched),
        "forward_ms": 1e3 * statistics.fmean(forward),
    }


def order_figures(lines: list[dict[str, Any]]) -> dict[str, float]:
    calls = [line for line in lines if "order" in line]
    figures: dict[str, float] = {}
    for low, high in BUCKETS:
        times = [c["order"] for c in calls if low <= c["waiting"] <= high]
        if times:
            figures[f"{low}-{high}"] = 1e6 * statistics.median(times)
    return figures


def setup(prefix: str) -> Path:
    """SGLang's CPU engine for this process and its engines; a work directory (``prefix``)
    holding the tiny model of SGLang's adapter tests at ``model`` (no tokenizer: SGLang
    starts on it with ``skip_tokenizer_init`` and is sent token ids)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    os.environ["PYTHONPATH"] = cpu.pythonpath(os.environ.get("PYTHONPATH", ""))
    cpu.install()
    work = Path(tempfile.mkdtemp(prefix=prefix))
    tiny_llama(work / "model")
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = setup("schedkit-sglang-overhead-")
    rng = random.Random(1)
    step: dict[str, list[dict[str, float]]] = {arm: [] for arm in STEP_ARMS}
    order: dict[str, list[dict[str, float]]] = {arm: [] for arm in ORDER_ARMS}
    for round_index in range(args.rounds):
        arms = [("step", a) for a in STEP_ARMS] + [("order", a) for a in ORDER_ARMS]
        rng.shuffle(arms)
        for kind, arm in arms:
            policy = (STEP_ARMS if kind == "step" else ORDER_ARMS)[arm]
            lines = run_arm(work / "model", policy, kind, work / f"{kind}-{arm}.jsonl")
            if kind == "step":
                step[arm].append(step_figures(lines))
            else:
                order[arm].append(order_figures(lines))
            print(f"round {round_index + 1} {kind} {arm}: done", file=sys.stderr)
    print("Scheduler work per step (model forward excluded); per round the mean and the")
    print("median over steps, then the median over rounds of each and of the paired ratios:")
    print(
        f"{'arm':<12} {'mean ms':>9} {'ratio':>8} {'median ms':>10} {'ratio':>8} {'steps':>6}"
        f" {'forward ms':>10} {'ratio':>8}"
    )
    stock = step["stock"]
    for arm, rounds in step.items():
        cells = []
        for key in ("sched_ms", "sched_median_ms"):
            ratios = [r[key] / s[key] for r, s in zip(rounds, stock, strict=True)]
            value = statistics.median(r[key] for r in rounds)
            cells.append(f"{value:>9.3f} {statistics.median(ratios):>7.3f}x")
        steps = int(statistics.median(r["steps"] for r in rounds))
        fwd = [r["forward_ms"] / s["forward_ms"] for r, s in zip(rounds, stock, strict=True)]
        forward_ms = statistics.median(r["forward_ms"] for r in rounds)
        print(
            f"{arm:<12} {cells[0]} {cells[1]:>19} {steps:>6} {forward_ms:>10.2f}"
            f" {statistics.median(fwd):>7.3f}x"
        )
    forward = statistics.median(r["forward_ms"] for r in step["stock"])
    print(f"(model forward, stock: {forward:.2f} ms/step)")
    print("\nOne calc_priority call, median microseconds by waiting-queue length:")
    header = "".join(f"{f'{lo}-{hi}':>12}" for lo, hi in BUCKETS)
    print(f"{'arm':<16}{header}")
    for arm, rounds in order.items():
        cells = []
        for low, high in BUCKETS:
            values = [r[f"{low}-{high}"] for r in rounds if f"{low}-{high}" in r]
            cells.append(f"{statistics.median(values):>12.1f}" if values else f"{'-':>12}")
        print(f"{arm:<16}{''.join(cells)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"step": step, "order": order}, indent=1))


if __name__ == "__main__":
    main()
