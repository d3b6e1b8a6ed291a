"""The live replayer's own cost (issue #16): how fast ``bench --engine openai`` drives a
trivial streaming endpoint on loopback, and how close to its arrival time it sends each
request.

The endpoint is ``schedkit.testing.openai_stub`` in a process of its own (the client must
not share its interpreter), streaming one chunk per token with no delay. Two runs:

1. throughput: ``--requests`` requests offered at ``--rate`` req/s, ``--output`` tokens
   each; the client's sustained completed req/s and streamed tokens/s over the run;
2. timestamp accuracy: 50 req/s, 1,000 requests; how late each was sent after its
   arrival time (``engine.targets.<arm>.send_lag_ms``), p50 / p99 / max.

    .venv/bin/python benchmarks/fidelity/live_replayer.py [--requests 4000] [--rate 2000] [--output 32]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

from schedkit.bench.runner import BenchSpec, run_bench


def _serve(conn: Any) -> None:
    from schedkit.testing.openai_stub import serve_stub

    with serve_stub(max_model_len=1 << 20) as stub:
        conn.send(stub.url)
        conn.recv()  # until the parent is done


def replay(url: str, workload: str, out: Path) -> dict[str, Any]:
    spec = BenchSpec(workload=workload, policies=["fcfs"], engine="openai", targets=[url])
    started = time.perf_counter()
    results = run_bench(spec, out)
    metrics = results["arms"][0]["metrics"]
    return {
        "wall_s": time.perf_counter() - started,
        "completed": metrics["completed"],
        "failed": metrics["failed"],
        "output_tokens": metrics["output_tokens"],
        "throughput_tok_s": metrics["throughput_tok_s"],
        "send_lag_ms": results["engine"]["targets"]["fcfs"]["send_lag_ms"],
        "requests": metrics["requests"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    url = parent.recv()
    work = Path(tempfile.mkdtemp(prefix="schedkit-live-"))
    try:
        load = f"poisson:rate={args.rate:g},n={args.requests},prompt=64,output={args.output}"
        fast = replay(url, load, work / "throughput")
        span = fast["wall_s"]  # the whole bench: workload, replay, metrics and reports
        accuracy = replay(url, "poisson:rate=50,n=1000,prompt=64,output=8", work / "accuracy")
    finally:
        parent.send("stop")
        server.join(10)
    print(f"throughput: {load}")
    print(
        f"  {fast['completed']:,} completed, {fast['failed']} failed in {span:.2f} s wall:"
        f" {fast['completed'] / span:,.0f} req/s, {fast['output_tokens'] / span:,.0f}"
        f" streamed tokens/s (metrics: {fast['throughput_tok_s']:,.0f} tok/s)"
    )
    lag = accuracy["send_lag_ms"]
    print("timestamp accuracy: poisson:rate=50,n=1000,prompt=64,output=8")
    print(f"  send lag p50 {lag['p50']:.3f} ms, p99 {lag['p99']:.3f} ms, max {lag['max']:.3f} ms")
    if args.json:
        args.json.write_text(json.dumps({"throughput": fast, "accuracy": accuracy}, indent=1))


if __name__ == "__main__":
    main()
