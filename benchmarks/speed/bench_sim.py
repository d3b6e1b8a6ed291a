"""How fast the simulated engine replays a workload, and how that grows with its size.

Run pinned to one core::

    taskset -c 1 python benchmarks/speed/bench_sim.py [--repeat 3]
        [--only azure demo growth growth-load mooncake mooncake-full evict stretch]
        [--profile azure|mooncake]

Times are the best of ``--repeat`` runs, in CPU seconds (``time.process_time``) and wall
seconds (``time.perf_counter``); only the replay is timed, not parsing or generating the
workload. Targets: the whole azure-conv trace in at most 3 s (18,000 requests/s); one
demo arm (azure-conv at 4x) at 20,000 requests/s or more; time(100k) / time(10k) at most
10.5 on a steady Poisson stream and on one at high load; mooncake-conv's first 2,000
requests at 10,000 requests/s or more (issue #40).

The script uses only the engine's public entry points, so the same file can time an
older checkout: ``PYTHONPATH=<checkout> python benchmarks/speed/bench_sim.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.facade import PolicyFacade
from schedkit.sim.engine import SimEngine

if TYPE_CHECKING:  # only for annotations: older checkouts kept it in schedkit.bench.records
    from schedkit.records import RunResult

AZURE_LIMIT_S = 3.0
GROWTH_LIMIT = 10.5
MOONCAKE_TARGET = 10_000  # requests/s on mooncake-conv's first 2,000 (issue #40)
# Eviction policies against LRU (fcfs never calls the eviction hook): mooncake-conv's first
# 1,500 requests at a quarter of the recorded rate, as in benchmarks/policies/evict.md.
# Key hooks (the engine keeps the order; the window does not apply) run in interleaved
# rounds with LRU, so each round's ratio compares replays made moments apart on this noisy
# machine; the list hook is timed with and without the window.
EVICT_KEYED = ("fcfs", "lfu", "slru", "prefix-aware")
EVICT_LISTED = ("prefix-aware-queued",)
EVICT_LIMIT = 1.5  # replay time vs LRU, issue #13
EVICT_BLOCKS = (8_000, 30_000)
EVICT_WINDOWS = (4096, 0)  # the default window, and every evictable block
# azure-conv's own rate and about its lengths: a steady load, neither idle nor queueing.
POISSON = "poisson:rate=5.5,n={n},prompt=1024,output=200"
# the same lengths at high load: batches near max_num_seqs (256), a queue (issue #40)
POISSON_LOAD = "poisson:rate=30,n={n},prompt=1024,output=200"
SECTIONS = (
    "azure",
    "demo",
    "growth",
    "growth-load",
    "mooncake",
    "mooncake-full",
    "evict",
    "stretch",
)
DEMO_TARGET = 20_000  # requests/s of replay for one arm of `make demo` (issue #40)
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

    def _decode_stretch(self, *args: Any) -> None:
        self.iterations += 1
        super()._decode_stretch(*args)

    def _run_decode_steps(self, *args: Any) -> None:  # its name before #13, to time old code
        self.iterations += 1
        super()._run_decode_steps(*args)  # type: ignore[misc]


def growth(stream: str, rep: int) -> None:
    """Replay time against size on one stream: time(100k) / time(10k)."""
    print(f"## growth with size: {stream}\n{HEADER}")
    points = {}
    for n in (1_000, 10_000, 30_000, 100_000):
        points[n] = t = measure(f"poisson n={n:,}", bench_for(stream.format(n=n)), repeat=rep)
        print(f"{t.row()}  {t.cpu_s / n * 1e6:.1f} us/req")
    big, small = points[100_000], points[10_000]
    ratio = big.cpu_s / small.cpu_s
    print(
        f"time(100k) / time(10k) = {ratio:.2f}, target <= {GROWTH_LIMIT}:"
        f" {verdict(ratio, GROWTH_LIMIT)} (iterations x{big.iterations / small.iterations:.2f})\n"
    )


def bench_for(workload: str, max_requests: int | None = None, **spec: Any) -> Bench:
    spec = BenchSpec(workload=workload, max_requests=max_requests, **{"policies": ["fcfs"], **spec})
    return Bench(spec)  # Llama-3-8B on H100-SXM, tp 1: BenchSpec's defaults


def replay(bench: Bench, stretch: bool = True) -> RunResult:
    if stretch:
        return bench.run_arm(0, bench.spec.workload.rate_scale)  # the path `schedkit bench` takes
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


def best_cpu(bench: Bench, repeat: int) -> tuple[float, RunResult]:
    """CPU seconds of the fastest of ``repeat`` replays, and its result."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        c0 = time.process_time()
        run = replay(bench)
        best = min(best, time.process_time() - c0)
    return best, run


def evict_bench(policy: str, blocks: int, window: int) -> Bench:
    return bench_for(
        "mooncake-conv", 1_500, policies=[policy], rate_scale=0.25, kv_blocks=blocks,
        eviction_window=window,
    )  # fmt: skip


def evict_section(blocks: int, rounds: int) -> None:
    """Key policies in ``rounds`` interleaved rounds with LRU (best time, and the median of
    each round's ratio to LRU's), then the list hook with and without the window."""
    benches = {p: evict_bench(p, blocks, 0) for p in EVICT_KEYED}
    times: dict[str, list[float]] = {p: [] for p in EVICT_KEYED}
    runs: dict[str, RunResult] = {}
    for _ in range(rounds):
        for policy, bench in benches.items():
            gc.collect()
            c0 = time.process_time()
            runs[policy] = replay(bench)
            times[policy].append(time.process_time() - c0)
    lru = min(times["fcfs"])

    def row(label: str, window: str, cpu: float, spread: str, run: RunResult) -> None:
        hits = run.prefix_hit_tokens / max(1, run.prefix_query_tokens)
        print(f"{blocks:>9,} {label:<19} {window:>6} {cpu:>7.3f} {cpu / lru:>5.2f}x {spread:>22}"
              f" {hits:>8.3%}")  # fmt: skip

    for policy in EVICT_KEYED:
        ratios = sorted(t / f for t, f in zip(times[policy], times["fcfs"], strict=True))
        median = ratios[len(ratios) // 2]
        spread = "" if policy == "fcfs" else f"{median:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"
        label = "LRU (fcfs)" if policy == "fcfs" else policy
        row(label, "-" if policy == "fcfs" else "none", min(times[policy]), spread, runs[policy])
        if policy != "fcfs":
            print(
                f"{'':>9} target <= {EVICT_LIMIT}x by round median: {verdict(median, EVICT_LIMIT)}"
            )
    for policy in EVICT_LISTED:
        for window in EVICT_WINDOWS:
            cpu, run = best_cpu(evict_bench(policy, blocks, window), min(rounds, 3))
            row(policy, str(window or "all"), cpu, "", run)


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

    if "demo" in args.only:  # one arm of `make demo`: azure-conv at 4x, queues and full batches
        demo = {"workload": {"name": "azure-conv", "rate_scale": 4.0}, "policies": ["fcfs"]}
        t = measure("azure-conv x4 fcfs", Bench(BenchSpec.model_validate(demo)), repeat=rep)
        rate = t.requests / t.cpu_s
        print(f"## one demo arm: azure-conv at 4x\n{HEADER}\n{t.row()}")
        print(f"{rate:,.0f} requests/s, target >= {DEMO_TARGET:,}: {verdict(DEMO_TARGET, rate)}\n")

    for section, stream in (("growth", POISSON), ("growth-load", POISSON_LOAD)):
        if section in args.only:
            growth(stream, rep)

    if "mooncake" in args.only:
        t = measure("mooncake-conv first 2,000", bench_for("mooncake-conv", 2_000), repeat=rep)
        print(f"## mooncake-conv, first 2,000 (shared prefixes)\n{HEADER}\n{t.row()}")
        rate = t.requests / t.cpu_s
        print(
            f"{rate:,.0f} requests/s, target >= {MOONCAKE_TARGET:,}:"
            f" {verdict(MOONCAKE_TARGET, rate)}\n"
        )

    if "mooncake-full" in args.only:
        # The whole trace at its recorded rate on one replica is overloaded: the queue grows
        # to thousands. Replay cost per request should stay flat as it does.
        total = len(bench_for("mooncake-conv").base.requests)
        print(f"## mooncake-conv, growing prefixes of the whole trace (overloaded)\n{HEADER}")
        for share in (0.25, 0.5, 1.0):
            n = round(total * share)
            t = measure(
                f"mooncake-conv {share:.0%} ({n:,})", bench_for("mooncake-conv", n), repeat=rep
            )
            print(f"{t.row()}  {t.cpu_s / n * 1e6:.1f} us/req")
        print()

    if "evict" in args.only:
        print("## eviction policies vs LRU, mooncake-conv first 1,500 at 0.25x")
        print(f"{'KV blocks':>9} {'policy':<19} {'window':>6} {'cpu s':>7} {'vs LRU':>6}"
              f" {'round median (range)':>22} {'hit rate':>8}")  # fmt: skip
        for blocks in EVICT_BLOCKS:
            evict_section(blocks, rep)
        print()

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
