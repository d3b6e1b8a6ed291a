"""How steady is this machine? The floor under any step profile recorded on it.

A decode step on a CPU is bound by memory bandwidth (it reads every weight once), a
long prefill by compute. This script measures both, one window after another, on
whatever cores it is pinned to: the memory bandwidth of a 100 MB copy and the FLOP rate
of a 256x256 float32 matrix product, each window ``--window`` seconds long::

    taskset -c 1 python benchmarks/fidelity/noise.py --seconds 40

It prints each window's figures, then per measure the min, median and max and the
spread, (max - min) / median. A step profile cannot predict a step more closely than
the machine repeats it, and latencies amplify the step error (``loop.py``'s
elasticity), so a machine whose bandwidth spread is 20% cannot show simulated
latencies within 10% of measured ones near saturation, however good the simulator.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

COPY_BYTES = 100_000_000
MATRIX = 256


def window(seconds: float) -> tuple[float, float]:
    """(GB/s copied, GFLOP/s multiplied) over one window, half of it each."""
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    a = np.random.default_rng(0).random((MATRIX, MATRIX), dtype=np.float32)
    start, copies = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 2:
        np.copyto(dst, src)
        copies += 1
    copy_s = time.perf_counter() - start
    start, products = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 2:
        a @ a
        products += 1
    product_s = time.perf_counter() - start
    # a copy reads and writes every byte
    return 2 * copies * COPY_BYTES / copy_s / 1e9, 2 * products * MATRIX**3 / product_s / 1e9


def summary(values: list[float]) -> dict[str, float]:
    median = statistics.median(values)
    return {"min": min(values), "median": median, "max": max(values),
            "spread": (max(values) - min(values)) / median}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="total time measured")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per window")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if not (args.window > 0 and args.seconds >= args.window):
        parser.error("need --window > 0 and --seconds >= --window")
    bandwidth, flops = [], []
    for i in range(int(args.seconds // args.window)):
        gbs, gflops = window(args.window)
        bandwidth.append(gbs)
        flops.append(gflops)
        print(f"window {i:3d}: {gbs:6.2f} GB/s copied, {gflops:6.1f} GFLOP/s")
    report = {"window_s": args.window, "memory_gbs": summary(bandwidth),
              "compute_gflops": summary(flops), "windows": list(zip(bandwidth, flops, strict=True))}  # fmt: skip
    for name in ("memory_gbs", "compute_gflops"):
        s = report[name]
        print(f"{name}: min {s['min']:.2f}, median {s['median']:.2f}, max {s['max']:.2f},"
              f" spread {s['spread']:.0%}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
