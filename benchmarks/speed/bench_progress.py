"""What showing progress costs a bench (issue #38 item 5).

The same bench (azure-conv at 4x, fcfs against shortest-prompt) with the display off (a
library call: nothing shown, the simulator's ``on_sample`` hook unset), with plain lines
(stderr not a terminal, as in a CI log) and with the terminal's redrawn line (stderr a
pseudo-terminal, drained by a thread), interleaved in rounds. Two timings per mode: the
arms alone (``run_arms`` on a prepared bench, where the hooks run) and the whole bench
(``run_bench``: loading, arms, statistics, reports)::

    taskset -c 0 .venv/bin/python benchmarks/speed/bench_progress.py [--rounds 9]
        [--requests N] [--jobs 1]

Prints each mode's median wall and CPU time, and its ratio to the display off: the median
of the rounds' ratios (each round runs every mode, in turn first), with their range.
``--jobs 1`` runs the arms in this process, so the display thread competes with the
simulator for the interpreter; with more, the arms run in forked workers that only write
to shared memory (CPU time then counts this process alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from schedkit.bench import progress
from schedkit.bench.runner import Bench, BenchSpec, run_arms, run_bench

MODES = ("off", "plain", "terminal")


@contextmanager
def shown(mode: str) -> Iterator[None]:
    """The display in ``mode``: off, plain lines into /dev/null, or a pseudo-terminal."""
    if mode == "off":
        yield
        return
    saved = sys.stderr
    progress.show_progress(True)
    if mode == "plain":
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - closed below
        try:
            yield
        finally:
            sys.stderr.close()
            sys.stderr = saved
            progress.show_progress(False)
        return
    master, replica = os.openpty()
    drain = threading.Thread(target=_drain, args=(master,), daemon=True)
    drain.start()
    sys.stderr = open(replica, "w", closefd=True)  # noqa: SIM115 - closed below
    try:
        yield
    finally:
        sys.stderr.close()
        sys.stderr = saved
        progress.show_progress(False)
        drain.join(timeout=1)
        os.close(master)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # the terminal closed
        return


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of ``work`` (CPU: this process's threads, the display's
    included; on a shared machine it moves less with other load than the wall time)."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=None, help="first N of azure-conv")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    spec = BenchSpec(
        workload="azure-conv", policies=["fcfs", "shortest-prompt"], rate_scale=4.0,
        slo_ttft_ms=2000.0, slo_tpot_ms=100.0, max_requests=args.requests, jobs=args.jobs,
    )  # fmt: skip
    bench = Bench(spec)
    out = Path(tempfile.mkdtemp(prefix="bench-progress-"))
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for mode in MODES[r % 3 :] + MODES[: r % 3]:  # each mode first in a third of rounds
            with shown(mode):
                times.setdefault(("arms", mode), []).append(timed(lambda: run_arms(bench)))
                run = timed(lambda: run_bench(spec, out, overwrite=True))
                times.setdefault(("bench", mode), []).append(run)
    print(
        f"{len(bench.base.requests):,} requests x {len(spec.policies)} arms, --jobs"
        f" {args.jobs}, {args.rounds} rounds. Median seconds; ratio to off: the median of"
        " each round's ratio (min .. max)"
    )
    for what in ("arms", "bench"):
        for clock, index in (("wall", 0), ("cpu", 1)):
            base = [t[index] for t in times[(what, "off")]]
            cells = []
            for mode in MODES:
                mine = [t[index] for t in times[(what, mode)]]
                ratios = [m / b for m, b in zip(mine, base, strict=True)]
                cells.append(
                    f"{mode} {statistics.median(mine):.3f} s ({statistics.median(ratios):.3f}x,"
                    f" {min(ratios):.3f} .. {max(ratios):.3f})"
                )
            print(f"  {what} {clock}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
