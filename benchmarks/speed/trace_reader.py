"""Time and peak memory of the Azure CSV readers (csv module, pyarrow) on a large trace.

    python benchmarks/speed/trace_reader.py generate TRACE.csv --gb 1
    python benchmarks/speed/trace_reader.py run TRACE.csv [--full-requests] [--json OUT]

``generate`` writes an Azure-2024-style trace (``TIMESTAMP,ContextTokens,GeneratedTokens``,
``2024-05-10 00:00:00.009930+00:00``, ~43 requests/s, lognormal lengths; ~26M rows per GB).
``run`` measures each case in a fresh interpreter (so every peak is its own and every
pyarrow import is paid), printing a table: wall seconds, peak RSS and the RSS the
interpreter had before reading. Cases: ``rows`` reads the cells into columns and stops
(the reader alone: the whole file, or ``--max-requests``-style truncated); ``requests``
is ``load_workload`` with ``max_requests`` (TraceRequest objects built, as the bench gets
them). ``--full-requests`` adds ``load_workload`` of the whole file, which holds every
request in memory (~250 B each) and needs ``SCHEDKIT_MAX_REQUESTS`` raised past 10M; this
script raises it for its children. Pin it to one core (``taskset -c 0``) on a shared machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

START = dt.datetime(2024, 5, 10, tzinfo=dt.UTC)
RATE_RPS = 43.0


def generate(path: Path, gigabytes: float, seed: int = 0) -> int:
    rnd = random.Random(seed)
    target = int(gigabytes * 1e9)
    written, rows, t_us = 0, 0, 0
    prefixes: dict[int, str] = {}
    with path.open("w", newline="") as f:
        header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        f.write(header)
        written += len(header)
        while written < target:
            lines = []
            for _ in range(100_000):
                t_us += max(1, int(rnd.expovariate(RATE_RPS) * 1e6))
                second, micros = divmod(t_us, 1_000_000)
                if (prefix := prefixes.get(second)) is None:
                    prefixes.clear()
                    stamp = START + dt.timedelta(seconds=second)
                    prefix = prefixes[second] = f"{stamp:%Y-%m-%d %H:%M:%S}"
                prompt = min(100_000, int(rnd.lognormvariate(7.0, 1.0)))
                output = min(8_000, int(rnd.lognormvariate(5.0, 1.0)))
                lines.append(f"{prefix}.{micros:06d}+00:00,{prompt},{output}\n")
            chunk = "".join(lines)
            f.write(chunk)
            written += len(chunk)
            rows += len(lines)
    return rows


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(path: Path, reader: str, mode: str, max_requests: int | None) -> dict[str, object]:
    """One case, in this process: read, then report seconds, peak and starting RSS.

    ``reader`` ``load-then-truncate`` is ``load_workload(path).truncated(n)``: what the bench
    runner does with ``--max-requests``, and the only way before streaming (it runs on any
    schedkit, so it measures older ones too, with ``PYTHONPATH``)."""
    import numpy  # noqa: F401  (imported before the baseline, as the readers import it)

    from schedkit.workload import load_workload

    before = _rss_mb()  # with schedkit and numpy imported
    started = time.perf_counter()
    if reader == "load-then-truncate":
        workload = load_workload(str(path))
        count = len((workload.truncated(max_requests) if max_requests else workload).requests)
    elif mode == "rows":
        from schedkit.workload.formats import azure_csv
        from schedkit.workload.loader import _trace_source

        source = _trace_source(path, path.name)
        if reader == "pyarrow":
            from schedkit.workload.formats import azure_arrow

            rows = azure_arrow.read_azure_rows_pyarrow(source, max_requests)
            assert rows is not None, "pyarrow declined"
        else:
            rows = azure_csv.read_azure_rows(source, max_requests)
        count = len(rows.day)
    else:
        from schedkit.workload.formats import azure

        # load_workload picks the reader by size; force one for the measurement.
        size_bytes, size_requests = (0, 0) if reader == "pyarrow" else (1 << 62, 1 << 62)
        azure.PYARROW_MIN_BYTES, azure.PYARROW_MIN_REQUESTS = (
            size_bytes,
            size_requests,
        )
        count = len(load_workload(str(path), max_requests=max_requests).requests)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "reader": reader,
        "mode": mode,
        "max_requests": max_requests,
        "rows": count,
        "seconds": round(seconds, 3),
        "peak_rss_mb": round(peak, 1),
        "start_rss_mb": round(before, 1),
    }


def run(path: Path, full_requests: bool, sizes: list[int]) -> list[dict[str, object]]:
    cases: list[tuple[str, str, int | None]] = []
    for mode in ("rows", "requests"):
        for n in sizes:
            cases += [(reader, mode, n) for reader in ("csv", "pyarrow")]
    cases += [("csv", "rows", None), ("pyarrow", "rows", None)]
    if full_requests:
        cases += [("csv", "requests", None), ("pyarrow", "requests", None)]
    results = []
    env = {**os.environ, "SCHEDKIT_MAX_REQUESTS": "100000000"}
    for reader, mode, n in cases:
        argv = [sys.executable, __file__, "one", str(path), reader, mode, str(n or 0)]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        result = json.loads(out.stdout)
        print(
            f"{mode:8} {reader:8} max_requests={n!s:>9} rows={result['rows']:>10,}"
            f" {result['seconds']:8.2f} s  peak {result['peak_rss_mb']:8.1f} MB"
            f" (start {result['start_rss_mb']:.1f} MB)",
            flush=True,
        )
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate")
    gen.add_argument("path", type=Path)
    gen.add_argument("--gb", type=float, default=1.0)
    go = commands.add_parser("run")
    go.add_argument("path", type=Path)
    go.add_argument("--full-requests", action="store_true")
    go.add_argument("--sizes", default="1000,100000,1000000")
    go.add_argument("--json", type=Path)
    one = commands.add_parser("one")
    for name in ("path", "reader", "mode", "max_requests"):
        one.add_argument(name)
    args = parser.parse_args()
    if args.command == "generate":
        started = time.perf_counter()
        rows = generate(args.path, args.gb)
        size = args.path.stat().st_size
        print(f"{rows:,} rows, {size:,} bytes in {time.perf_counter() - started:.0f} s")
    elif args.command == "run":
        sizes = [int(n) for n in args.sizes.split(",") if n]
        results = run(args.path, args.full_requests, sizes)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n")
    else:
        n = int(args.max_requests) or None
        print(json.dumps(measure(Path(args.path), args.reader, args.mode, n)))


if __name__ == "__main__":
    main()
