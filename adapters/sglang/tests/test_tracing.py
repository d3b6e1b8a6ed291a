"""schedkit's admission decisions on SGLang's request spans: a real ``schedkit serve
sglang`` server with SGLang's tracing on (``--enable-trace``, OTLP over HTTP) exports its
spans to a receiver on loopback; the scheduler's span of an admitted and of a rejected
request carries the policy, whether it rejected the request and why. The server runs in
its own session and is killed in a ``finally``; every wait is bounded."""

from __future__ import annotations

import subprocess
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from schedkit.testing.otlp import otlp_receiver
from test_server import (
    ECHO_PROMPT,
    OPTIONS,
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


def test_scheduler_spans_carry_the_admission_decision(
    model_dir: Path, tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    endpoint, spans = receiver
    port = _free_port()
    base, log = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    env = {**_env(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
           "SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS": "200"}  # fmt: skip
    args = [*_engine_args(model_dir, port), "--enable-trace", "--otlp-traces-endpoint", endpoint]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [SCHEDKIT, "serve", "sglang", "--policy", POLICY, "--options", OPTIONS, "--", *args],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(server, base, log)
        body = {"sampling_params": {"max_new_tokens": 2}}
        _post(f"{base}/generate", {"input_ids": [3] * (ECHO_PROMPT - 1), **body})
        with pytest.raises(urllib.error.HTTPError):  # 503: rejected
            _post(f"{base}/generate", {"input_ids": [3] * ECHO_PROMPT, **body})
        deadline = time.monotonic() + 60
        while not any(s.get("schedkit.rejected") for s in spans):
            assert time.monotonic() < deadline, f"spans: {spans}\n{_tail(log)}"
            time.sleep(0.2)
    finally:
        _kill(server)
    decided = [s for s in spans if "schedkit.rejected" in s]
    admitted = [s for s in decided if s["schedkit.rejected"] is False]
    rejected = [s for s in decided if s["schedkit.rejected"] is True]
    assert len(rejected) == 1 and admitted, decided  # admitted: ours and SGLang's warmup
    assert all(s["schedkit.policy"] == POLICY for s in decided)
    assert not any("schedkit.rejection" in s for s in admitted)
    assert rejected[0]["schedkit.rejection"].startswith("tenant=default "), rejected
