"""``schedkit serve sim`` as a user runs it: a process on a port, ``bench --engine openai``
against it, and one-line errors for bad arguments."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from schedkit.bench.runner import BenchSpec, run_bench


def serve_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", "serve", "sim", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "GPT-9"], ["unknown model 'GPT-9'", "Llama-3-8B", "--profile"]),
        (["--gpu", "TPU"], ["unknown GPU 'TPU'", "H100-SXM", "profile file"]),
        (["--max-num-seqs", "0"], ["--max-num-seqs", "greater than 0"]),
        (["--bogus"], ["unrecognized arguments: --bogus"]),
        (["--max-model-len", "99999999"], ["--max-model-len 99999999", "KV cache"]),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], words: list[str]) -> None:
    proc = serve_sim("--", *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = " ".join(proc.stderr.split())
    assert all(w in line for w in words), proc.stderr


def test_a_port_in_use_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = serve_sim("--", "--port", str(port))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"port {port} on 127.0.0.1 is in use" in proc.stderr and "--port" in proc.stderr


def start(policy: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``schedkit serve sim --policy policy -- args`` on a free port, once healthy."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedkit", "serve", "sim", "--policy", policy, "--",
         "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1)
            return proc, url
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)


def test_bench_replays_a_trace_against_it(tmp_path: Path) -> None:
    """A server process with a policy, a replay of 30 requests against it: every one
    finishes, the results say what served them, and SIGTERM stops it cleanly."""
    proc, url = start("sjf", "--max-num-seqs", "8")
    try:
        spec = BenchSpec(
            workload="azure-conv", policies=["sjf"], engine="openai", targets=[url],
            max_requests=30, rate_scale=4.0,
        )  # fmt: skip
        results = run_bench(spec, tmp_path / "out")
        page = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "policy sjf" in out and "simulated Llama-3-8B on H100-SXM" in out
    metrics = results["arms"][0]["metrics"]
    assert metrics["completed"] == 30, json.dumps(metrics)[:500]
    assert results["engine"]["targets"]["sjf"]["server"] == "schedkit-sim"
    assert (
        'vllm:request_success_total{finished_reason="length",model_name="Llama-3-8B"} 30.0' in page
    )


def test_its_prefix_hits_are_the_simulators(tmp_path: Path) -> None:
    """mooncake-conv's shared prefixes, replayed against the server as token ids, hit its
    prefix cache as they hit the offline simulator's for the same trace (the bench reads
    ``cached_tokens`` from the usage the server streams)."""
    gpu = ["--gpu", "H200", "--tp", "4"]  # a fast replica: the replay takes less wall time
    proc, url = start("fcfs", *gpu, "--max-model-len", "131072")  # mooncake's prompts unclipped
    common = {"workload": "mooncake-conv", "policies": ["fcfs"], "max_requests": 80,
              "rate_scale": 2.0}  # fmt: skip
    try:
        live = run_bench(BenchSpec(engine="openai", targets=[url], **common), tmp_path / "live")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    offline = run_bench(BenchSpec(engine="sim", gpu="H200", tp=4, **common), tmp_path / "sim")
    hits = [r["arms"][0]["metrics"]["prefix_hit_rate"] for r in (live, offline)]
    assert hits[1] > 0.03
    assert hits[0] == pytest.approx(hits[1], abs=0.02)


def test_a_live_arms_prefix_hits_are_paired_samples() -> None:
    """A live run's records have no scheduling time; where the server reported its
    prefix hits, the finished requests are the paired comparison's samples of them."""
    from schedkit.bench.stats.paired import samples
    from schedkit.records import RequestRecord, RunResult

    records = [
        RequestRecord(
            request_id=f"r{i}",
            tenant="t",
            priority=0,
            arrival_s=float(i),
            prompt_tokens=100,
            max_tokens=4,
            first_token_s=i + 0.1,
            finish_s=i + 0.5,
            finish_reason="length",
            output_tokens=4,
            cached_tokens=c,
        )
        for i, c in enumerate([0, 64, 32])
    ]
    run = RunResult(policy="p", records=records, duration_s=3.0)
    assert samples(run)["prefix"].sum() == 0  # nothing reported: no sample
    run.prefix_query_tokens, run.prefix_hit_tokens = 300, 96
    prefix = samples(run)["prefix"]
    assert prefix[:, 0].tolist() == [0, 64, 32] and prefix[:, 1].tolist() == [100, 100, 100]
