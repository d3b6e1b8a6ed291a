"""How many requests per second one ``schedkit serve sim`` process serves in real time.

One server process (``schedkit serve sim``, its own core with ``--server-cpu``) is driven
by ``schedkit bench --engine openai`` (this process) with the azure-conv trace at rising
``--rate-scale``s, and each rate's replay is also run offline on the simulator (``bench
--engine sim``, same trace, settings and policy): the baseline the live server should
reproduce. Per rate it prints the modelled replica's load (mean running requests, its
throughput), the server's late steps (``schedkit_sim_late_steps_total``: tokens released
later than ``--max-lag-ms`` after their modelled time) and the client's TTFT/TPOT p50/p90
against the offline run's (live / offline). The server keeps up while late steps stay
near 0 and the ratios near 1; it stops keeping up where they grow.

    .venv/bin/python benchmarks/speed/serve_sim_capacity.py --scales 1 2 4 6 8 --seconds 40
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.edge.remote import parse_metrics

NATIVE_RATE = 5.53  # azure-conv's requests per second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "schedkit", "serve", "sim", "--policy", args.policy, "--",
               "--port", str(port), "--model", args.model, "--gpu", args.gpu, "--tp", str(args.tp),
               "--max-num-seqs", str(args.max_num_seqs), "--max-lag-ms", str(args.max_lag_ms)]  # fmt: skip
    if args.server_cpu is not None:
        command = ["taskset", "-c", args.server_cpu, *command]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("schedkit serve sim did not start") from None
            time.sleep(0.2)


def scrape(port: int) -> dict[str, float]:
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return parse_metrics(page)


def one_rate(args: argparse.Namespace, scale: float, out: Path) -> dict[str, Any]:
    requests = int(NATIVE_RATE * scale * args.seconds)
    common = dict(workload="azure-conv", policies=[args.policy], max_requests=requests,
                  rate_scale=scale)  # fmt: skip
    engine = dict(model=args.model, gpu=args.gpu, tp=args.tp, max_num_seqs=args.max_num_seqs)
    offline = run_bench(BenchSpec(engine="sim", **common, **engine), out / f"sim-{scale}")
    port = free_port()
    server = start_server(args, port)
    try:
        live = run_bench(
            BenchSpec(engine="openai", targets=[f"http://127.0.0.1:{port}"], **common),
            out / f"live-{scale}",
        )
        gauges = scrape(port)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    lm, om = live["arms"][0]["metrics"], offline["arms"][0]["metrics"]
    row: dict[str, Any] = {
        "scale": scale,
        "rate_rps": round(NATIVE_RATE * scale, 1),
        "requests": requests,
        "completed": lm["completed"],
        "steps": gauges.get("schedkit_sim_steps_total", 0.0),
        "late_steps": gauges.get("schedkit_sim_late_steps_total", 0.0),
        "modelled_tok_s": round(om["throughput_tok_s"]),
        "live_tok_s": round(lm["throughput_tok_s"]),
        "send_lag_p99_ms": live["engine"]["targets"][args.policy].get("send_lag_ms", {}).get("p99"),
    }
    for metric in ("ttft_ms", "tpot_ms"):
        for q in ("p50", "p90"):
            row[f"{metric}_{q}_live"] = round(lm[metric][q], 1)
            row[f"{metric}_{q}_sim"] = round(om[metric][q], 1)
            row[f"{metric}_{q}_ratio"] = round(lm[metric][q] / om[metric][q], 3)
    row["late_share"] = round(row["late_steps"] / max(1.0, row["steps"]), 4)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--seconds", type=float, default=40.0, help="of trace per rate")
    parser.add_argument("--model", default="Llama-3-8B")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--policy", default="fcfs")
    parser.add_argument("--max-lag-ms", type=float, default=20.0)
    parser.add_argument("--server-cpu", default="1", help="taskset the server to it ('' = none)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.server_cpu = args.server_cpu or None
    if args.server_cpu is not None:
        os.sched_setaffinity(0, {0})  # the client on the other core
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales:
            rows.append(one_rate(args, scale, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    keys = ["rate_rps", "completed", "late_share", "modelled_tok_s", "live_tok_s", "send_lag_p99_ms",
            "ttft_ms_p50_ratio", "ttft_ms_p90_ratio", "tpot_ms_p50_ratio", "tpot_ms_p90_ratio"]  # fmt: skip
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
