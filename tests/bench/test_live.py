"""``bench --engine openai``: replay over HTTP against servers on loopback (the stub of
``schedkit.testing.openai_stub``; the real vLLM and SGLang servers are in the adapters'
suites). Every request ends, counted with its reason, whatever the server does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.errors import SchedkitError
from schedkit.testing.openai_stub import serve_stub

WORKLOAD = "poisson:rate=40,n=40,prompt=32,output=6"


def trace(path: Path, tenants: list[str], output: int = 6) -> str:
    """A schedkit JSONL trace, one request per tenant name, 20 ms apart."""
    lines = [json.dumps({"workload": {"name": "modes"}})]
    for i, tenant in enumerate(tenants):
        request = {"arrival_s": 0.02 * i, "prompt_tokens": 24, "output_tokens": output}
        lines.append(json.dumps({**request, "tenant": tenant, "slo_ttft_ms": 500.0}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def live(out: Path, workload: str, targets: list[str], **spec: Any) -> dict[str, Any]:
    policies = spec.pop("policies", ["fcfs"] * len(targets))
    return run_bench(
        BenchSpec(workload=workload, policies=policies, engine="openai", targets=targets, **spec),
        out,
    ).to_json()


def test_ab_of_two_servers_carries_metadata_as_each_adapter_reads_it(tmp_path: Path) -> None:
    with serve_stub("vllm", token_delay_s=0.002) as a, serve_stub("sglang") as b:
        results = live(
            tmp_path / "ab", trace(tmp_path / "t.jsonl", ["alice", "bob"] * 10),
            [a.url, b.url], policies=["fcfs", "priority"],
        )  # fmt: skip
    first, second = results["arms"]
    for arm in (first, second):
        m = arm["metrics"]
        assert m["completed"] == 20 and m["failed"] == 0 and m["errors"] == {}
        assert m["ttft_ms"]["p50"] > 0 and m["e2e_ms"]["p50"] >= m["ttft_ms"]["p50"]
        assert m["output_tokens"] == 20 * 6
    # the slower server streams slower: the client measures it
    assert first["metrics"]["tpot_ms"]["p50"] > second["metrics"]["tpot_ms"]["p50"] + 1.0
    assert [r["headers"]["x-tenant-id"] for r in a.received[:2]] == ["alice", "bob"]
    body_a, body_b = a.received[0]["body"], b.received[0]["body"]
    assert body_a["vllm_xargs"] == {"tenant": "alice", "slo_ttft_ms": 500.0}
    assert body_b["custom_params"] == {"tenant": "alice", "slo_ttft_ms": 500.0}
    assert "custom_params" not in body_a and "vllm_xargs" not in body_b
    assert body_a["stream"] is True and isinstance(body_a["prompt"], list)
    targets = results["engine"]["targets"]
    assert targets["fcfs"]["url"] == a.url and targets["fcfs"]["server"] == "vllm"
    assert targets["priority"]["url"] == b.url and targets["priority"]["server"] == "sglang"
    assert targets["fcfs"]["send_lag_ms"]["max"] >= targets["fcfs"]["send_lag_ms"]["p50"] >= 0
    assert results["comparisons"][0]["policy"] == "priority"  # the paired comparison
    assert (tmp_path / "ab" / "report.html").is_file()


def test_every_failure_is_counted_with_its_reason(tmp_path: Path) -> None:
    modes = ["ok", "error-500", "rejected", "cut", "not-a-stream", "hang", "ok"]
    started = time.perf_counter()
    with serve_stub() as stub:
        results = live(
            tmp_path / "modes", trace(tmp_path / "t.jsonl", modes, output=8), [stub.url],
            request_timeout_s=2.0,
        )  # fmt: skip
    assert time.perf_counter() - started < 30  # the hanging stream timed out
    m = results["arms"][0]["metrics"]
    assert m["requests"] == 7 and m["completed"] == 2 and m["rejected"] == 1
    assert m["rejections"] == {"tenant over quota": 1}
    assert m["failed"] == 4 and m["unfinished"] == 0
    errors = m["errors"]
    assert errors.pop("HTTP 500: boom") == 1
    assert errors.pop("stream ended before the request finished (4 tokens)") == 1
    assert errors.pop("timed out after 2 s") == 1
    [(reason, count)] = errors.items()
    assert count == 1 and ("stream" in reason or "OpenAI" in reason)  # the HTML page
    assert m["slo_attainment"] == pytest.approx(2 / 7)  # every failure is a miss


def test_an_unreachable_target_fails_every_request_and_the_run_ends(tmp_path: Path) -> None:
    results = live(tmp_path / "down", WORKLOAD, ["http://127.0.0.1:9"], request_timeout_s=2.0)
    m = results["arms"][0]["metrics"]
    assert m["failed"] == 40 and m["completed"] == 0
    [reason] = m["errors"]
    assert reason.startswith("unreachable:")
    assert results["engine"]["targets"]["fcfs"]["problem"] == reason


def test_a_server_that_is_not_openai_compatible(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        m = live(tmp_path / "nf", WORKLOAD, [url])["arms"][0]["metrics"]
    finally:
        server.shutdown()
    assert m["errors"] == {"GET /v1/models: HTTP 404": 40}


def test_concurrency_limit_and_deadline(tmp_path: Path) -> None:
    with serve_stub(token_delay_s=0.01) as stub:
        results = live(tmp_path / "cap", WORKLOAD, [stub.url], max_concurrency=2, max_seconds=0.5)
    m = results["arms"][0]["metrics"]
    assert stub.peak <= 2
    sent = len(stub.received)
    assert 0 < sent < 40 and m["completed"] == sent
    assert m["errors"] == {"not sent: --max-seconds 0.5 reached": 40 - sent}


def test_no_request_is_sent_on_a_connection_the_server_may_be_closing(tmp_path: Path) -> None:
    # a server whose keep-alive timer fires as a request arrives loses that request; the
    # stub drops any request on a connection idle over 2.5 s (uvicorn closes at 5 s), and
    # a burst, a 3 s pause and a second burst would reuse the burst's idle connections
    lines = [json.dumps({"workload": {"name": "pause"}})]
    for arrival in (0.0, 0.01, 0.02, 0.03, 3.0, 3.01, 3.02, 3.03):
        lines.append(json.dumps({"arrival_s": arrival, "prompt_tokens": 8, "output_tokens": 2}))
    path = tmp_path / "pause.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with serve_stub(stale_s=2.5) as stub:
        m = live(tmp_path / "pause", str(path), [stub.url])["arms"][0]["metrics"]
    assert stub.dropped == 0 and m["errors"] == {} and m["completed"] == 8


def test_bad_live_arguments_are_refused_before_anything_runs(tmp_path: Path) -> None:
    from schedkit.bench.runner import Bench

    with pytest.raises(SchedkitError, match="give --target URL per arm"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], engine="openai"))
    with pytest.raises(SchedkitError, match="one arm per --target: 2 arm"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs", "priority"], engine="openai",
                        targets=["http://127.0.0.1:1"]))  # fmt: skip
    with pytest.raises(SchedkitError, match="'localhost:8000' is not an http"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], engine="openai",
                        targets=["localhost:8000"]))  # fmt: skip
    with pytest.raises(SchedkitError, match="--target drive running servers: add --engine openai"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], targets=["http://x:1"]))
    with pytest.raises(SchedkitError, match=r"--max-num-seqs 8 .the servers run with"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], engine="openai",
                        targets=["http://x:1"], max_num_seqs=8))  # fmt: skip


def test_the_cli_says_how_many_failed(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "bench", "--engine", "openai", "--target",
         "http://127.0.0.1:9", "--workload", "poisson:rate=40,n=10", "--policy", "fcfs",
         "--request-timeout-s", "2", "--out", str(tmp_path / "cli")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "requests failed (fcfs: 10)" in " ".join((proc.stdout + proc.stderr).split())


def test_a_served_model_name_needs_no_profile(tmp_path: Path) -> None:
    with serve_stub() as stub:
        results = live(tmp_path / "name", WORKLOAD, [stub.url], model="org/Some-Model-7B")
    assert results["engine"]["model"] == "org/Some-Model-7B"
    assert results["arms"][0]["metrics"]["completed"] == 40
    assert stub.received[0]["body"]["model"] == "stub"  # the id the server lists


# --serve-command: one target, a server started per arm (the stub as a process of its own)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stub_command(port: int, extra: str = "") -> str:
    return f"{sys.executable} -m schedkit.testing.openai_stub --port {port} --owned-by {{policy}} {extra}"


def test_each_arm_gets_a_server_started_with_its_policy(tmp_path: Path) -> None:
    from schedkit.bench.engines.launch import answers

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    results = live(tmp_path / "served", WORKLOAD, [url], policies=["fcfs", "vtc+lcf"],
                   serve_command=stub_command(port), server_start_timeout_s=60)  # fmt: skip
    for arm in results["arms"]:
        assert arm["metrics"]["completed"] == 40
    targets = results["engine"]["targets"]
    for index, label in enumerate(["fcfs", "vtc+lcf"]):
        launched = targets[label]["launched"]
        assert launched["command"][-2:] == ["--owned-by", label]
        log = (tmp_path / "served" / launched["log"]).read_text()
        assert f"owned_by {label}" in log, log  # the server this arm replayed against
        assert launched["log"] == f"server-{index}-{label}.log"
    assert not answers(url), "the last arm's server is still up"


def test_a_server_that_fails_or_is_in_the_way_stops_the_bench_with_its_log(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    crash = f"{sys.executable} -c 'import sys; print(\"no such model\"); sys.exit(3)' {{policy}}"
    with pytest.raises(SchedkitError, match=r"exited with status 3 before .*\n.*no such model"):
        live(tmp_path / "crash", WORKLOAD, [url], serve_command=crash)
    slow = f"{sys.executable} -c 'import time; time.sleep(60)' {{policy}}"
    with pytest.raises(
        SchedkitError, match=r"did not answer within 1 s .*--server-start-timeout-s"
    ):
        live(tmp_path / "slow", WORKLOAD, [url], serve_command=slow, server_start_timeout_s=1)
    with serve_stub() as running, pytest.raises(SchedkitError, match="already answers at"):
        live(tmp_path / "taken", WORKLOAD, [running.url], serve_command=stub_command(port))


def test_serve_command_arguments_are_checked_before_anything_runs() -> None:
    from schedkit.bench.runner import Bench

    two = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    with pytest.raises(SchedkitError, match="behind one --target; got 2"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs", "vtc"], engine="openai",
                        targets=two, serve_command="serve {policy}"))  # fmt: skip
    with pytest.raises(SchedkitError, match=r"has no \{policy\}"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], engine="openai",
                        targets=two[:1], serve_command="schedkit serve vllm"))  # fmt: skip
    with pytest.raises(SchedkitError, match="--serve-command drive running servers"):
        Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"], serve_command="x {policy}"))
