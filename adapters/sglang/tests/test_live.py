"""``schedkit bench --engine openai`` against a real SGLang server (``schedkit serve
sglang``) over its OpenAI API, on loopback.

SGLang's OpenAI routes return text, so this server has a tokenizer (one word per token,
as the vLLM suite's) and runs without ``--skip-tokenizer-init``; prompts are still token
ids. One server at a time: it starts after ``test_server``'s has stopped.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_util import tiny_model
from test_server import (
    ECHO_PROMPT,
    OPTIONS,
    POLICY,
    SCHEDKIT,
    _engine_args,
    _env,
    _free_port,
    _kill,
    _wait_healthy,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model = tiny_model(tmp_path_factory.mktemp("tiny-llama-words"), word_tokenizer=True)
    port = _free_port()
    log = tmp_path_factory.mktemp("live-log") / "server.log"
    args = [a for a in _engine_args(model, port) if a != "--skip-tokenizer-init"]
    command = [SCHEDKIT, "serve", "sglang", "--policy", POLICY, "--options", OPTIONS, "--"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command + args, stdout=out, stderr=subprocess.STDOUT, env=_env(),
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, base, log)
        yield base, model
    finally:
        _kill(process)


def test_bench_replays_live_over_the_openai_api(server: tuple[str, Path], tmp_path: Path) -> None:
    """Every request streamed and measured by the client; the two the policies reject
    counted with their reasons; the tenant carried in the header the server's trust
    believes."""
    base, model = server
    lines = [json.dumps({"workload": {"name": "live"}})]
    for i in range(8):
        request = {"arrival_s": 0.05 * i, "prompt_tokens": 24, "output_tokens": 4}
        lines.append(json.dumps({**request, "tenant": "acme" if i % 2 else "beta"}))
    lines.append(json.dumps({"arrival_s": 0.5, "prompt_tokens": ECHO_PROMPT,
                             "output_tokens": 2, "tenant": "acme"}))  # fmt: skip
    lines.append(json.dumps({"arrival_s": 0.6, "prompt_tokens": 100, "output_tokens": 2}))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "live"
    proc = subprocess.run(
        [SCHEDKIT, "bench", "--engine", "openai", "--target", base, "--policy", POLICY,
         "--model", str(model), "--workload", str(trace), "--request-timeout-s", "120",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**_env(), "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    m = results["arms"][0]["metrics"]
    assert m["completed"] == 8 and m["rejected"] == 2 and m["failed"] == 0, m
    assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0 and m["output_tokens"] == 32
    reasons = sorted(m["rejections"])
    assert reasons[0] == "prompt of N tokens > N", reasons
    assert reasons[1].startswith("tenant=acme priority=N"), reasons
    assert results["engine"]["targets"][POLICY]["server"] == "sglang"
