"""A live A/B: two real vLLM servers (``schedkit serve vllm``, each with its own policy) on
loopback, driven by ``schedkit bench --engine openai`` over their OpenAI API.

The servers run in their own sessions and are killed in a ``finally``; every wait is
bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_server import SCHEDKIT, _engine_args, _env, _free_port, _kill, _wait_healthy

ECHO = "priority+test-echo-metadata"  # rejects 17-token prompts, naming what it saw
N = 12


def _start(policy: str, model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [SCHEDKIT, "serve", "vllm", "--policy", policy, "--", *_engine_args(model, port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    logs = tmp_path_factory.mktemp("live-logs")
    started = [_start(policy, tiny_model, logs / f"{i}.log") for i, policy in enumerate(
        ("fcfs", ECHO))]  # fmt: skip
    try:
        for i, (process, base) in enumerate(started):
            _wait_healthy(process, base, logs / f"{i}.log")
        yield [base for _, base in started]
    finally:
        for process, _ in started:
            _kill(process)


def test_live_ab_of_two_policies_on_two_servers(
    servers: list[str], tiny_model: Path, tmp_path: Path
) -> None:
    lines = [json.dumps({"workload": {"name": "two-tenants"}})]
    for i in range(N):
        tenant = "acme" if i % 2 else "beta"
        request = {"arrival_s": 0.05 * i, "prompt_tokens": 24, "output_tokens": 6}
        lines.append(json.dumps({**request, "tenant": tenant}))
    lines.append(json.dumps({"arrival_s": 0.7, "prompt_tokens": 17, "output_tokens": 4,
                             "tenant": "acme"}))  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ab"
    site = str(Path(__file__).with_name("site"))  # the bench names ECHO's policies too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [SCHEDKIT, "bench", "--engine", "openai", "--target", servers[0], "--target",
         servers[1], "--policy", "fcfs", "--policy", ECHO, "--model", str(tiny_model),
         "--workload", str(trace), "--request-timeout-s", "120", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**env, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    fcfs, echo = results["arms"]
    assert fcfs["metrics"]["completed"] == N + 1 and fcfs["metrics"]["failed"] == 0
    assert echo["metrics"]["completed"] == N and echo["metrics"]["failed"] == 0
    # The 17-token prompt met the echo policy in the second server's scheduler, with the
    # tenant from the header the client set (the server's default trust believes it).
    [reason] = echo["metrics"]["rejections"]
    assert reason.startswith("tenant=acme priority=N"), reason
    for arm in (fcfs, echo):
        m = arm["metrics"]
        assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0 and m["output_tokens"] > 0
    targets = results["engine"]["targets"]
    assert [targets[a]["url"] for a in ("fcfs", ECHO)] == servers
    assert {targets[a]["server"] for a in targets} == {"vllm"}
    assert results["comparisons"][0]["policy"] == ECHO
    assert (out / "report.html").is_file()


def test_one_target_with_a_server_started_per_arm(tiny_model: Path, tmp_path: Path) -> None:
    """``--serve-command``: each arm starts ``schedkit serve vllm --policy {policy}`` on the
    one target and stops it after; the echo policy's rejection shows which server ran."""
    import shlex

    port = _free_port()
    command = shlex.join(
        [SCHEDKIT, "serve", "vllm", "--policy", "{policy}", "--", *_engine_args(tiny_model, port)]
    )
    lines = [json.dumps({"workload": {"name": "one-target"}})]
    for i in range(4):
        lines.append(json.dumps({"arrival_s": 0.05 * i, "prompt_tokens": 24, "output_tokens": 4}))
    lines.append(json.dumps({"arrival_s": 0.3, "prompt_tokens": 17, "output_tokens": 4}))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "switch"
    proc = subprocess.run(
        [SCHEDKIT, "bench", "--engine", "openai", "--target", f"http://127.0.0.1:{port}",
         "--serve-command", command, "--server-start-timeout-s", "300", "--policy", "fcfs",
         "--policy", ECHO, "--model", str(tiny_model), "--workload", str(trace),
         "--request-timeout-s", "120", "--out", str(out)],
        capture_output=True, text=True, timeout=900, env={**_env(), "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    fcfs, echo = results["arms"]
    assert fcfs["metrics"]["completed"] == 5 and not fcfs["metrics"]["rejections"]
    assert echo["metrics"]["completed"] == 4 and len(echo["metrics"]["rejections"]) == 1
    for label in ("fcfs", ECHO):
        launched = results["engine"]["targets"][label]["launched"]
        assert label in launched["command"]
        assert (out / launched["log"]).stat().st_size > 0
