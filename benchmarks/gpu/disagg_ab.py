"""Aggregated against disaggregated serving on real GPUs, beside the simulator's A/B of the
same deployments (issue #42 item 5: the GPU script for the day a machine is available).

On a machine with two GPUs, vLLM (0.32 or later, with NIXL: ``pip install nixl``) and
this repository installed, one trace (``--workload`` at ``--rate-scale``, its first
``--num-prompts`` requests) is replayed against

- **aggregated**: one ``schedkit serve vllm`` replica at TP 2 on both GPUs;
- **disaggregated**: a prefill replica on GPU 0 and a decode replica on GPU 1, each TP 1,
  joined by vLLM's ``NixlConnector`` (``kv_both``), with ``python -m schedkit.edge.pd``
  in front (vLLM's toy-proxy protocol: the prefill with ``max_tokens=1``, then the
  decode with the prefill's ``kv_transfer_params``);

both through ``schedkit bench --engine openai``, each server under ``--policy``; then the
simulator runs the same two deployments on the same trace (``schedkit bench --engine sim
--gpu --arm name=aggregated,tp=2 --arm name=disaggregated,prefill_replicas=1,...``,
``--kv-link`` the GPUs' link, ``nvlink4`` for H100 SXM). The table gives TTFT, TPOT and
E2E (p50, p90) of each arm, real and simulated, and the disaggregated arm's change
against the aggregated one, real and simulated: what a user wants to know before
splitting prefill from decode. Every command is printed and kept in ``--out``'s
``disagg-ab.json``::

    python benchmarks/gpu/disagg_ab.py --model /models/Qwen2.5-7B-Instruct \\
        --gpu H100-SXM --out disagg-ab

``--dry-run`` prints the commands and runs nothing; ``--sim-only`` runs the simulated
half alone (seconds, on any machine: the core tests run it so the script cannot rot).
``--model`` is a local Hugging Face model directory: vLLM serves it and the simulator
reads its ``config.json``. Expected time on two H100s: about 2 minutes to start each
deployment and the replay's length (~4 minutes for 400 requests of azure-conv at 1x).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
METRICS = [(m, q) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p90")]
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
STARTUP_S = 900


class Runner:
    """Runs (or, dry, prints) the commands, keeping each in ``log``."""

    def __init__(self, dry: bool) -> None:
        self.dry = dry
        self.log: list[str] = []

    def run(self, command: list[Any]) -> None:
        shown = shlex.join(str(c) for c in command)
        self.log.append(shown)
        print("$", shown, flush=True)
        if not self.dry:
            subprocess.run([str(c) for c in command], check=True)

    def start(
        self, command: list[Any], env: dict[str, str], log: Path
    ) -> subprocess.Popen[bytes] | None:
        shown = shlex.join([*(f"{k}={v}" for k, v in env.items()), *map(str, command)])
        self.log.append(shown + " &")
        print("$", shown, "&", flush=True)
        if self.dry:
            return None
        with log.open("wb") as out:
            return subprocess.Popen([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **env}, start_new_session=True)  # fmt: skip


def wait_up(url: str, process: subprocess.Popen[bytes] | None, log: Path) -> None:
    """Until ``url/health`` answers; exits naming the server when it dies or is slow."""
    deadline = time.monotonic() + STARTUP_S
    while process is not None:
        if process.poll() is not None:
            sys.exit(f"{url} exited ({process.returncode}); its log: {log}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            sys.exit(f"{url} not up after {STARTUP_S} s; its log: {log}")
        time.sleep(2)


def stop(processes: list[subprocess.Popen[bytes] | None]) -> None:
    for process in processes:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def serve(a: argparse.Namespace, port: int, tp: int, extra: list[str]) -> list[Any]:
    return [BIN / "schedkit", "serve", "vllm", "--policy", a.policy, "--",
            "--model", a.model, "--host", "127.0.0.1", "--port", port,
            "--tensor-parallel-size", tp, *extra]  # fmt: skip


def replay(a: argparse.Namespace, r: Runner, target: str, out: Path) -> None:
    r.run([BIN / "schedkit", "bench", "--engine", "openai", "--target", target,
           "--policy", a.policy, "--model", a.model, *trace(a), "--out", out, "--overwrite"])  # fmt: skip


def trace(a: argparse.Namespace) -> list[Any]:
    return ["--workload", a.workload, "--num-prompts", a.num_prompts, "--rate-scale", a.rate_scale]


def aggregated(a: argparse.Namespace, r: Runner, out: Path) -> None:
    url = f"http://127.0.0.1:{a.port}"
    log = out / "aggregated.log"
    server = r.start(serve(a, a.port, 2, []), {"CUDA_VISIBLE_DEVICES": "0,1"}, log)
    try:
        wait_up(url, server, log)
        replay(a, r, url, out / "real-aggregated")
    finally:
        stop([server])


def disaggregated(a: argparse.Namespace, r: Runner, out: Path) -> None:
    ports = {"prefill": a.port + 1, "decode": a.port + 2, "proxy": a.port + 3}
    config = ["--kv-transfer-config", json.dumps(NIXL, separators=(",", ":"))]
    started: list[subprocess.Popen[bytes] | None] = []
    try:
        for gpu, role in enumerate(("prefill", "decode")):
            env = {"CUDA_VISIBLE_DEVICES": str(gpu),
                   "VLLM_NIXL_SIDE_CHANNEL_PORT": str(a.port + 10 + gpu)}  # fmt: skip
            log = out / f"{role}.log"
            started.append(r.start(serve(a, ports[role], 1, config), env, log))
            wait_up(f"http://127.0.0.1:{ports[role]}", started[-1], log)
        proxy = [sys.executable, "-m", "schedkit.edge.pd", "--policy", a.router,
                 "--prefill", f"http://127.0.0.1:{ports['prefill']}",
                 "--decode", f"http://127.0.0.1:{ports['decode']}", "--port", ports["proxy"]]  # fmt: skip
        log = out / "proxy.log"
        started.append(r.start(proxy, {}, log))
        wait_up(f"http://127.0.0.1:{ports['proxy']}", started[-1], log)
        replay(a, r, f"http://127.0.0.1:{ports['proxy']}", out / "real-disaggregated")
    finally:
        stop(started)


def simulate(a: argparse.Namespace, r: Runner, out: Path) -> None:
    agg = f"name=aggregated,policy={a.policy},tp=2"
    pd = (f"name=disaggregated,policy={a.policy},prefill_replicas=1,decode_replicas=1,"
          f"kv_link={a.kv_link}")  # fmt: skip
    r.run([BIN / "schedkit", "bench", "--engine", "sim", "--model", a.model, "--gpu", a.gpu,
           *trace(a), "--arm", agg, "--arm", pd, "--out", out / "sim", "--overwrite"])  # fmt: skip


def figures(results: Path, arm: str | None = None) -> dict[str, float] | None:
    """An arm's TTFT/TPOT/E2E p50/p90 (ms) from a results.json; None if it is not there."""
    if not results.exists():
        return None
    arms = json.loads(results.read_text())["arms"]
    chosen = arms[-1] if arm is None else next(x for x in arms if x["policy"] == arm)
    metrics = chosen["metrics"]
    return {f"{m} {q}": float(metrics[m][q]) for m, q in METRICS}


def table(out: Path) -> str:
    """The side-by-side table: each arm real and simulated, and disaggregated vs
    aggregated, real and simulated."""
    got = {
        "real aggregated": figures(out / "real-aggregated" / "results.json"),
        "real disaggregated": figures(out / "real-disaggregated" / "results.json"),
        "sim aggregated": figures(out / "sim" / "results.json", "aggregated"),
        "sim disaggregated": figures(out / "sim" / "results.json", "disaggregated"),
    }
    keys = [f"{m} {q}" for m, q in METRICS]
    lines = ["| arm | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, row in got.items():
        cells = [f"{row[k]:,.1f}" if row else "not run" for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for kind in ("real", "sim"):
        agg, pd = got[f"{kind} aggregated"], got[f"{kind} disaggregated"]
        cells = [f"{pd[k] / agg[k] - 1:+.0%}" if agg and pd and agg[k] else "" for k in keys]
        lines.append(f"| {kind}: disaggregated vs aggregated | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face model directory")
    parser.add_argument("--gpu", default="H100-SXM", help="the simulator's GPU profile")
    parser.add_argument("--kv-link", default="nvlink4", help="the simulator's KV link")
    parser.add_argument("--workload", default="azure-conv")
    parser.add_argument("--num-prompts", type=int, default=400)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--policy", default="fcfs", help="the servers' (and the router's)")
    parser.add_argument("--router", default="least-loaded", help="the proxy's route_request")
    parser.add_argument("--port", type=int, default=8400, help="and the next three, +10, +11")
    parser.add_argument("--out", type=Path, default=Path("disagg-ab"))
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--sim-only", action="store_true", help="the simulated half only")
    a = parser.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    r = Runner(a.dry_run)
    began = time.monotonic()
    if not a.sim_only:
        aggregated(a, r, a.out)
        disaggregated(a, r, a.out)
    simulate(a, r, a.out)
    report = {"commands": r.log, "wall_s": time.monotonic() - began, "table": table(a.out)}
    (a.out / "disagg-ab.json").write_text(json.dumps(report, indent=1) + "\n")
    print(report["table"])


if __name__ == "__main__":
    main()
