"""schedkit's decisions on vLLM's own request spans (schedkit_vllm/tracing.py): a real
``schedkit serve vllm`` server with vLLM's tracing on (``--otlp-traces-endpoint``, OTLP
over HTTP) exports its ``llm_request`` spans to a receiver on loopback; the admitted and
the rejected request's spans carry the policy, whether it rejected them and why, and
their preemption count. The server runs in its own session and is killed in a
``finally``; every wait is bounded."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from schedkit.testing.otlp import otlp_receiver
from test_server import (
    ECHO_PROMPT,
    POLICY,
    SCHEDKIT,
    _engine_args,
    _env,
    _free_port,
    _kill,
    _post,
    _tail,
    _wait_healthy,
)  # fmt: skip


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with otlp_receiver() as received:
        yield received


def test_request_spans_carry_schedkit_decisions(
    tiny_model: Path, tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    endpoint, spans = receiver
    port = _free_port()
    base, log = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    env = {**_env(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
           "OTEL_BSP_SCHEDULE_DELAY": "200"}  # fmt: skip
    args = [*_engine_args(tiny_model, port), "--otlp-traces-endpoint", endpoint]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [SCHEDKIT, "serve", "vllm", "--policy", POLICY, "--", *args],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(server, base, log)
        for prompt in (ECHO_PROMPT - 1, ECHO_PROMPT):  # admitted, then rejected
            body = {"model": str(tiny_model), "prompt": [3] * prompt, "max_tokens": 2}
            _post(f"{base}/v1/completions", body)
        deadline = time.monotonic() + 60
        while len([s for s in spans if s["name"] == "llm_request"]) < 2:
            assert time.monotonic() < deadline, f"spans: {spans}\n{_tail(log)}"
            time.sleep(0.2)
    finally:
        _kill(server)
    admitted, rejected = sorted(
        (s for s in spans if s["name"] == "llm_request"),
        key=lambda s: s["gen_ai.usage.prompt_tokens"],
    )
    assert admitted["gen_ai.usage.prompt_tokens"] == ECHO_PROMPT - 1  # vLLM's own attributes
    for span in (admitted, rejected):
        assert span["schedkit.policy"] == POLICY
        assert span["schedkit.preemptions"] == 0
    assert admitted["schedkit.rejected"] is False and "schedkit.rejection" not in admitted
    assert rejected["schedkit.rejected"] is True
    assert rejected["schedkit.rejection"].startswith("tenant=default "), rejected
