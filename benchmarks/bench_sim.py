"""How fast the simulated engine replays a workload, and how that grows with its size.

Run pinned to one core::

    taskset -c 0 python benchmarks/bench_sim.py [--repeat 3]
        [--only azure growth mooncake stretch] [--profile azure|mooncake]

Times are the best of ``--repeat`` runs, in CPU seconds (``time.process_time``) and wall
seconds (``time.perf_counter``); only the replay is timed, not parsing or generating the
workload. Targets: the whole azure-conv trace in at most 3 s, and time(100k) / time(10k)
at most 11 on a steady Poisson stream.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from dataclasses import dataclass
from typing import Any

from schedkit.bench.records import RunResult
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.facade import PolicyFacade
from schedkit.sim.engine import SimEngine

AZURE_LIMIT_S = 3.0
GROWTH_LIMIT = 11.0
# azure-conv's own rate and about its lengths: a steady load, neither idle nor queueing.
POISSON = "poisson:rate=5.5,n={n},prompt=1024,output=200"
SECTIONS = ("azure", "growth", "mooncake", "stretch")
PROFILES = {"azure": ("azure-conv", None), "mooncake": ("mooncake-conv", 2_000)}


@dataclass
class Timing:
    label: str
    requests: int
    cpu_s: float
    wall_s: float
    gc_s: float  # CPU seconds of the fastest run spent in the cyclic garbage collector
    steps: int  # engine steps simulated
    iterations: int  # loop iterations: steps executed one by one + runs advanced in one go
    mean_running: float  # from the 1 s timeline: how loaded the engine was
    max_waiting: int

    def row(self) -> str:
        return (
            f"{self.label:<28} {self.requests:>7,} {self.cpu_s:>7.3f} {self.wall_s:>7.3f}"
            f" {self.gc_s:>6.3f}"
            f" {self.requests / self.cpu_s:>9,.0f} {self.steps:>10,} {self.iterations:>9,}"
            f" {self.mean_running:>7.1f} {self.max_waiting:>7,}"
        )


HEADER = (
    f"{'run':<28} {'reqs':>7} {'cpu s':>7} {'wall s':>7} {'gc s':>6} {'reqs/s':>9} {'steps':>10}"
    f" {'iters':>9} {'running':>7} {'waiting':>7}"
)


class _GCTimer:
    """CPU seconds spent in the cyclic garbage collector while in the ``with`` block."""

    def __init__(self) -> None:
        self.seconds = self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start

    def __enter__(self) -> _GCTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class _CountingEngine(SimEngine):
    """SimEngine that counts its loop iterations (used once, untimed)."""

    iterations = 0

    def _execute(self, *args: Any) -> None:
        self.iterations += 1
        super()._execute(*args)

    def _run_decode_steps(self, *args: Any) -> None:
        self.iterations += 1
        super()._run_decode_steps(*args)


def bench_for(workload: str, max_requests: int | None = None) -> Bench:
    spec = BenchSpec(workload=workload, policies=["fcfs"], max_requests=max_requests)
    return Bench(spec)  # Llama-3-8B on H100-SXM, tp 1: BenchSpec's defaults


def replay(bench: Bench, stretch: bool = True) -> RunResult:
    if stretch:
        return bench.run_arm(0, 1.0)  # the path `schedkit bench` takes
    facade = PolicyFacade.from_config(bench.configs[0])
    engine = SimEngine(bench.base.requests, bench.cost, bench.sim_config, facade, stretch=False)
    return engine.run()


def measure(label: str, bench: Bench, *, stretch: bool = True, repeat: int = 3) -> Timing:
    cpu = wall = gc_s = float("inf")
    for _ in range(repeat):
        gc.collect()  # each run starts from the same heap, not the previous run's garbage
        with _GCTimer() as collector:
            c0, w0 = time.process_time(), time.perf_counter()
            run = replay(bench, stretch)
            c1, w1 = time.process_time(), time.perf_counter()
        if c1 - c0 < cpu:
            cpu, gc_s = c1 - c0, collector.seconds
        wall = min(wall, w1 - w0)
    facade = PolicyFacade.from_config(bench.configs[0])
    counter = _CountingEngine(
        bench.base.requests, bench.cost, bench.sim_config, facade, stretch=stretch
    )
    counter.run()
    timeline = run.timeline
    return Timing(
        label,
        len(bench.base.requests),
        cpu,
        wall,
        gc_s,
        run.steps,
        counter.iterations,
        sum(p.running for p in timeline) / max(1, len(timeline)),
        max((p.waiting for p in timeline), default=0),
    )


def verdict(value: float, limit: float) -> str:
    return "met" if value <= limit else "MISSED"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the best is kept")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), help="cProfile one replay, print the top 15"
    )
    args = parser.parse_args(argv)
    rep = args.repeat

    if "azure" in args.only:
        t = measure("azure-conv fcfs", bench_for("azure-conv"), repeat=rep)
        print(f"## azure-conv, whole trace\n{HEADER}\n{t.row()}")
        print(
            f"cpu {t.cpu_s:.2f} s, target <= {AZURE_LIMIT_S} s: {verdict(t.cpu_s, AZURE_LIMIT_S)}\n"
        )

    if "growth" in args.only:
        print(f"## growth with size: {POISSON}\n{HEADER}")
        points = {}
        for n in (1_000, 10_000, 30_000, 100_000):
            points[n] = t = measure(f"poisson n={n:,}", bench_for(POISSON.format(n=n)), repeat=rep)
            print(f"{t.row()}  {t.cpu_s / n * 1e6:.1f} us/req")
        big, small = points[100_000], points[10_000]
        ratio = big.cpu_s / small.cpu_s
        print(
            f"time(100k) / time(10k) = {ratio:.2f}, target <= {GROWTH_LIMIT}:"
            f" {verdict(ratio, GROWTH_LIMIT)} (iterations x{big.iterations / small.iterations:.2f})\n"
        )

    if "mooncake" in args.only:
        t = measure("mooncake-conv first 2,000", bench_for("mooncake-conv", 2_000), repeat=rep)
        print(f"## mooncake-conv, first 2,000 (shared prefixes)\n{HEADER}\n{t.row()}\n")

    if "stretch" in args.only:
        bench = bench_for("azure-conv", 3_000)
        one = measure("azure-conv 3k stretch=False", bench, stretch=False, repeat=rep)
        run = measure("azure-conv 3k stretch=True", bench, stretch=True, repeat=rep)
        print(f"## stretch: runs of identical decode steps in one go\n{HEADER}")
        print(f"{one.row()}\n{run.row()}")
        print(
            f"stretch=False / stretch=True: {one.cpu_s / run.cpu_s:.1f}x cpu,"
            f" {one.iterations / run.iterations:.1f}x iterations\n"
        )

    if args.profile:
        workload, max_requests = PROFILES[args.profile]
        profile = cProfile.Profile()
        profile.runcall(replay, bench_for(workload, max_requests))
        print(f"## cProfile, {workload} (max_requests={max_requests}), top 15 by own time")
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
