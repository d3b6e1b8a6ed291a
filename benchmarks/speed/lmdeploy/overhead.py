"""The LMDeploy adapter's per-step scheduler overhead against stock LMDeploy, model-less.

Each arm runs in its own process (stock LMDeploy is never patched there), arms
alternate over ``--rounds``: ``--sequences`` requests arrive at once and decode
``--output`` tokens each through LMDeploy's real ``Scheduler``, driven as its engine loop
drives it (``schedkit_lmdeploy.harness.contract._Loop``). Timed: the scheduler's own calls per
step (the prefill turn or ``schedule_running``, ``activate_seqs``, ``end_session`` of the
finished), not the fabricated forward. Reported: the mean and median over the steps
with at least ``--sequences // 2`` running: median, p90 and mean (the mean includes
garbage-collector pauses and the step that ends every session), and the ratios to stock.

    .venv-lmdeploy/bin/python benchmarks/speed/lmdeploy/overhead.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

ARMS = ("stock", "fcfs", "priority")


def run_arm(arm: str, sequences: int, output: int) -> list[float]:
    """Seconds of scheduler work per step of one run of ``arm``."""
    import numpy as np
    from lmdeploy.pytorch.messages import MessageStatus, SamplingParam, UpdateTokenMode
    from schedkit_lmdeploy.harness.contract import _Loop
    from schedkit_lmdeploy.harness.modelless import PREFILL_INTERVAL, build_scheduler
    from schedkit_lmdeploy.patches import install

    from schedkit import PolicyFacade, PolicyRegistry

    prompt, block = 128, 32
    blocks = sequences * ((prompt + output + PREFILL_INTERVAL) // block + 2)
    scheduler = build_scheduler(blocks, block, sequences, 8192)
    if arm != "stock":
        policy = PolicyRegistry.discover().load(arm)()
        install(scheduler, PolicyFacade([(arm, policy)]))
    rng = np.random.default_rng(0)
    for i in range(sequences):
        tokens = rng.integers(1000, 30000, size=prompt)
        meta = {"request_id": f"r{i}", "priority": i % 4}
        seq = scheduler.add_session(i).add_sequence(
            tokens, sampling_param=SamplingParam(max_new_tokens=output)
        )
        seq.meta = meta
    loop = _Loop(scheduler, sequences, 8192)
    timings: list[float] = []
    while scheduler.sessions:
        t0 = time.perf_counter()
        kind, batch, invalid, _ = loop.next_forward()
        if invalid:
            scheduler.preempt_seqs(invalid)
        scheduler.activate_seqs(batch)
        t1 = time.perf_counter()
        mode = UpdateTokenMode.DECODE if kind == "decode" else UpdateTokenMode.PREFILL
        done = []
        for seq in batch:
            if seq.status == MessageStatus.RUNNING:
                seq.update_token_ids(np.array([7]), mode=mode)
                if seq.num_new_tokens >= output:
                    seq.state.finish()
                    done.append(seq.session_id)
        loop.running = batch if kind == "decode" else [*loop.running, *batch]
        t2 = time.perf_counter()
        for session_id in done:
            scheduler.end_session(session_id)
        loop.running = [s for s in loop.running if s.session_id in scheduler.sessions]
        t3 = time.perf_counter()
        if len(batch) >= sequences // 2:
            timings.append((t1 - t0) + (t3 - t2))
    return timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=300)
    parser.add_argument("--output", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one run, as JSON
    args = parser.parse_args(argv)
    if args.arm:
        json.dump(run_arm(args.arm, args.sequences, args.output), sys.stdout)
        return
    steps: dict[str, list[float]] = {arm: [] for arm in ARMS}
    paired: dict[str, list[float]] = {arm: [] for arm in ARMS}  # per round: median / stock's
    for _ in range(args.rounds):
        medians = {}
        for arm in ARMS:
            command = [sys.executable, __file__, "--arm", arm, "--sequences",
                       str(args.sequences), "--output", str(args.output)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            values = json.loads(done.stdout)
            steps[arm].extend(values)
            medians[arm] = statistics.median(values)
        for arm in ARMS:
            paired[arm].append(medians[arm] / medians["stock"])
    stock: Any = None
    print(f"{args.sequences} sequences x {args.output} tokens, {args.rounds} rounds")
    print(f"{'arm':<9} {'steps':>6} {'median us':>9} {'p90 us':>7} {'mean us':>8}"
          f" {'median':>7} {'p90':>7} {'mean':>7}")  # fmt: skip
    for arm, values in steps.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        mean = statistics.fmean(values)  # GC pauses and the step that ends every session
        stock = stock or (median, p90, mean)
        print(
            f"{arm:<9} {len(values):>6} {median * 1e6:>9.0f} {p90 * 1e6:>7.0f} {mean * 1e6:>8.0f}"
            f" {median / stock[0]:>6.3f}x {p90 / stock[1]:>6.3f}x {mean / stock[2]:>6.3f}x"
        )
    print("per round, median step vs the same round's stock (median of rounds, min-max):")
    for arm in ARMS[1:]:
        ratios = paired[arm]
        print(
            f"  {arm:<9} {statistics.median(ratios):.3f}x"
            f" ({min(ratios):.3f}-{max(ratios):.3f}x over {len(ratios)} rounds)"
        )


if __name__ == "__main__":
    main()
