"""Proof figures for the lcf plugin: lcf vs fcfs victims under KV pressure (see lcf.md).

    python benchmarks/policies/lcf_proof.py --kv-blocks 1000 --rate-scale 2 --window 3000

Cuts azure-conv into consecutive windows of ``--window`` requests (window 0 is exactly
what ``schedkit bench --max-requests`` replays), runs each through fcfs and lcf with the
bench's engine settings, with and without prefix caching, and prints per window:

- ``recomputed_tokens``: the bench's metric, tokens computed again after a preemption
  beyond what the prefix cache gave back at readmission;
- discarded tokens: ``num_computed_tokens`` of each victim when it was preempted (the
  measure of vLLM RFC #54644), counted by an observer policy added to both arms;
- preemptions.

The ratio lcf/fcfs of the totals gets a 95% CI from a bootstrap over windows (the windows
are the independent units; requests within a run are not).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "stats"))  # bootstrap.py

from bootstrap import DEFAULT_N_BOOT

from schedkit import Policy, PolicyFacade, StepReport, hookimpl
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.sim.engine import SimEngine

ARMS = ("fcfs", "lcf")


class DiscardedTokens(Policy):
    """Observer: sums the tokens each preempted request had computed when preempted."""

    def __init__(self) -> None:
        super().__init__()
        self.computed: dict[str, int] = {}
        self.discarded = 0

    @hookimpl
    def on_step_finished(self, report: StepReport) -> None:
        # A victim is never in ``scheduled`` of its step: its count is from earlier steps.
        for request in report.preempted:
            self.discarded += self.computed.pop(request.request_id, 0)
        for request in report.scheduled:
            self.computed[request.request_id] = request.num_computed_tokens


def run_window(bench: Bench, window: int, size: int, arm: int) -> tuple[int, int, int]:
    """(recomputed, discarded, preemptions) of one arm on one window."""
    requests = bench.base.requests[window * size : (window + 1) * size]
    scale = bench.spec.workload.rate_scale
    scaled = dataclasses.replace(bench.base, requests=requests).scaled(scale).requests
    probe = DiscardedTokens()
    selected = PolicyFacade.from_config(bench.configs[arm]).policies
    facade = PolicyFacade([*selected, ("discarded-tokens", probe)])
    run = SimEngine(scaled, bench.cost, bench.sim_config, facade).run()
    assert run.policy_errors == 0
    return run.recomputed_tokens, probe.discarded, run.preemptions


def ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "n/a"


def ratio_ci(pairs: Sequence[tuple[int, int]], seed: int = 0) -> tuple[float, float]:
    """95% bootstrap CI of sum(lcf) / sum(fcfs), resampling windows."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(DEFAULT_N_BOOT):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        base = sum(a for a, _ in sample)
        if base:
            ratios.append(sum(b for _, b in sample) / base)
    ratios.sort()
    return ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]


def report(args: argparse.Namespace, prefix_caching: bool) -> None:
    spec = BenchSpec(
        workload="azure-conv",
        policies=list(ARMS),
        rate_scale=args.rate_scale,
        kv_blocks=args.kv_blocks,
        prefix_caching=prefix_caching,
    )
    bench = Bench(spec)
    windows = min(args.windows, len(bench.base.requests) // args.window)
    caching = "on" if prefix_caching else "off"
    print(f"\nprefix caching {caching}: kv-blocks {args.kv_blocks}, rate-scale {args.rate_scale:g}")
    print(
        "| window | recomputed fcfs | lcf | ratio | discarded fcfs | lcf | ratio | preemptions fcfs | lcf |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    recomputed, discarded = [], []
    for w in range(windows):
        (rf, df, pf), (rl, dl, pl) = (run_window(bench, w, args.window, i) for i in range(2))
        recomputed.append((rf, rl))
        discarded.append((df, dl))
        print(
            f"| {w} | {rf:,} | {rl:,} | {ratio(rl, rf)} | {df:,} | {dl:,} | {ratio(dl, df)}"
            f" | {pf:,} | {pl:,} |"
        )
    for label, pairs in (("recomputed", recomputed), ("discarded", discarded)):
        total_f, total_l = sum(a for a, _ in pairs), sum(b for _, b in pairs)
        if not total_f:
            print(f"\n{label} tokens, all windows: fcfs 0, lcf {total_l:,}")
            continue
        lo, hi = ratio_ci(pairs)
        print(
            f"\n{label} tokens, all windows: fcfs {total_f:,}, lcf {total_l:,},"
            f" lcf/fcfs {total_l / total_f:.3f} (95% CI {lo:.3f} .. {hi:.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-blocks", type=int, default=1000)
    parser.add_argument("--rate-scale", type=float, default=2.0)
    parser.add_argument("--window", type=int, default=3000)
    parser.add_argument("--windows", type=int, default=6)
    args = parser.parse_args()
    for prefix_caching in (False, True):
        report(args, prefix_caching)


if __name__ == "__main__":
    main()
