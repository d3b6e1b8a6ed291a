"""SGLang's real HTTP server launched by ``schedkit serve sglang`` (tiny random-weight Llama,
on CPU, loopback only).

The server runs in its own session (process group) and is killed in a ``finally``; every
wait is bounded. One server at a time: SGLang on CPU takes the machine's cores.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from schedkit.testing.http import post_headers_only, post_raw

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")
STARTUP_S = 180  # healthy in ~60 s on an idle 2-core machine
MAX_NEW_TOKENS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _engine_args(model: Path, port: int) -> list[str]:
    return [
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--attention-backend",
        "torch_native",
        "--sampling-backend",
        "pytorch",
        "--disable-cuda-graph",
        "--disable-overlap-schedule",
        "--max-total-tokens",
        "4096",
        "--skip-tokenizer-init",  # token-id prompts: no tokenizer needed
        "--enable-metrics",
    ]


POLICY = "priority+test-reject-long+test-echo-metadata"  # the last two from tests/site
ECHO_PROMPT = 19  # prompts of this length are rejected with their metadata as the reason
OPTIONS = json.dumps(
    {"test-reject-long": {"max_prompt": 64}, "test-echo-metadata": {"prompt_tokens": ECHO_PROMPT}}
)
# The server's trust config: the tenant header counts only with the gateway's secret
# (every request of these tests comes "through the gateway" unless a test says otherwise).
SECRET_HEADER, SECRET = "x-gateway-secret", "gateway-secret-for-tests"
BODY_LIMIT = 1 << 20
CONFIG = {
    "policy": POLICY.split("+"),
    "options": json.loads(OPTIONS),
    "trust": {"gateway_secret_header": SECRET_HEADER, "max_body_bytes": BODY_LIMIT},
}


def _env() -> dict[str, str]:
    env = dict(os.environ, SCHEDKIT_GATEWAY_SECRET=SECRET)
    env.pop("SCHEDKIT_EDGE_KEY", None)  # schedkit serve makes one per launch
    site = str(Path(__file__).with_name("site"))
    env["PYTHONPATH"] = os.pathsep.join([site, env.get("PYTHONPATH", "")])
    for var in ("SCHEDKIT_CONFIG", "SCHEDKIT_POLICY", "SCHEDKIT_OPTIONS"):
        env.pop(var, None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # schedkit serve makes a fresh one
    return env


def _kill(process: subprocess.Popen[bytes]) -> None:
    """End the server and everything it started (its own process group)."""
    for signum, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return  # the whole group is gone
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:]


class Server(NamedTuple):
    base: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]  # the schedkit serve process
    log: Path


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_healthy(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    """Until ``base/health`` answers 200; fails with the log's tail if the server exits or
    is not healthy within ``STARTUP_S``."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server not healthy after {STARTUP_S} s:\n{_tail(log)}")
        time.sleep(1)


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = _free_port()
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    config = log.with_name("schedkit.json")
    config.write_text(json.dumps(CONFIG))
    command = [SCHEDKIT, "serve", "sglang", "--policy", str(config), "--"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command + _engine_args(model_dir, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, base, log)
        yield Server(base, process, log)
    finally:
        _kill(process)


def _post(
    url: str, body: dict[str, Any] | str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    data = body if isinstance(body, str) else json.dumps(body)
    given = {"Content-Type": "application/json", SECRET_HEADER: SECRET, **(headers or {})}
    request = urllib.request.Request(url, data=data.encode(), headers=given)
    with urllib.request.urlopen(request, timeout=60) as response:
        return dict(json.load(response))


def _seen(server: Server, body: dict[str, Any], headers: dict[str, str]) -> str:
    """What the scheduler saw of a request: the echo policy's rejection reason."""
    body = {"input_ids": [3] * ECHO_PROMPT, **body}
    body.setdefault("sampling_params", {})["max_new_tokens"] = 2
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(f"{server.base}/generate", body, headers)
    assert error.value.code == 503
    return error.value.read().decode()


def test_server_generates_under_the_policy(server: Server) -> None:
    def generate(i: int) -> dict[str, Any]:
        body = {
            "input_ids": [5 + i] * (8 + 3 * i),
            "sampling_params": {"max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
        }
        return _post(f"{server.base}/generate", body)

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(generate, range(6)))
    for result in results:
        assert len(result["output_ids"]) == MAX_NEW_TOKENS, result
        assert result["meta_info"]["completion_tokens"] == MAX_NEW_TOKENS, result


def test_a_rejected_request_gets_the_reason_over_http(server: Server) -> None:
    body = {"input_ids": [7] * 100, "sampling_params": {"max_new_tokens": 2}}
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(f"{server.base}/generate", body)
    assert error.value.code == 503  # as SGLang answers a full queue
    assert "rejected: prompt of 100 tokens > 64" in error.value.read().decode()


def test_metrics_endpoint_has_schedkit_metrics(server: Server) -> None:
    _post(
        f"{server.base}/generate",
        {"input_ids": [9] * 12, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}},
    )
    with urllib.request.urlopen(f"{server.base}/metrics", timeout=10) as response:
        text = response.read().decode()
    schedkit = [line for line in text.splitlines() if line.startswith("schedkit_")]
    # Counted in the scheduler process, served by the HTTP server's multiprocess registry.
    decisions = [
        line
        for line in schedkit
        if line.startswith("schedkit_policy_decisions_total{") and f'policy="{POLICY}"' in line
    ]
    assert decisions, "\n".join(schedkit) or text[-2000:]
    rejections = [line for line in schedkit if line.startswith("schedkit_rejections_total{")]
    assert any(line.endswith(" 1.0") for line in rejections), rejections
    assert "sglang:" in text  # SGLang's own metrics still served


def test_body_tenant_is_ignored_and_the_header_wins(server: Server) -> None:
    """The trust middleware (added by the plugin) with the default config."""
    body = {"sampling_params": {"custom_params": {"tenant": "victim"}}, "priority": -(2**62)}
    seen = _seen(server, body, {"X-Tenant-Id": "acme"})
    assert "rejected: tenant=acme priority=0 " in seen, seen
    assert "tenant=default " in _seen(server, {"sampling_params": {}}, {})


def test_nan_slo_gets_400_naming_the_field(server: Server) -> None:
    body = json.dumps(
        {"input_ids": [3] * 8, "sampling_params": {"max_new_tokens": 2, "custom_params": {}}}
    ).replace('"custom_params": {}', '"custom_params": {"slo_ttft_ms": "NaN"}')
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(f"{server.base}/generate", body)
    assert error.value.code == 400
    detail = json.load(error.value)["error"]
    assert detail["param"] == "sampling_params.custom_params.slo_ttft_ms", detail


# The attacks of issue #35: each got the client's claims to the policy before the edge
# read bodies as the engine does; each is now refused.

CLAIMS = {
    "input_ids": [3] * ECHO_PROMPT,
    "sampling_params": {"max_new_tokens": 2, "custom_params": {"tenant": "premium"}},
    "priority": -1000,
}
JSON = {"Content-Type": "application/json"}


def test_a_body_nested_deeper_than_the_bound_is_refused(server: Server) -> None:
    """The standard library gives up near 1,000 levels, SGLang's orjson reads 1,024: the
    edge used to forward such a body unread."""
    deep = '{"x": ' * 1010 + "1" + "}" * 1010
    data = json.dumps(CLAIMS)[:-1] + ', "deep": ' + deep + "}"
    code, answer = post_raw(f"{server.base}/generate", data.encode(), JSON)
    assert code == 400 and "nested more than 128 levels" in answer["error"]["message"], answer


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_bodies_in_other_encodings_are_refused(server: Server, encoding: str) -> None:
    data = json.dumps(CLAIMS).encode(encoding)
    code, answer = post_raw(f"{server.base}/generate", data, JSON)
    assert code == 400 and answer["error"]["param"] == "body", answer


def test_a_spoofed_tenant_header_is_refused_without_the_gateway_secret(server: Server) -> None:
    code, answer = post_raw(
        f"{server.base}/generate", json.dumps(CLAIMS).encode(), {**JSON, "x-tenant-id": "vip"}
    )
    assert code == 403 and answer["error"]["param"] == "header x-tenant-id", answer
    assert "tenant=vip " in _seen(server, {}, {"x-tenant-id": "vip"})  # through the gateway


def test_bodies_over_the_bound_get_413_and_huge_metadata_400(server: Server) -> None:
    code, answer = post_headers_only(server.base, "/generate", BODY_LIMIT + 1)
    assert code == 413 and answer["error"]["code"] == 413, answer
    many = {**CLAIMS, "sampling_params": {"custom_params": {f"k{i}": i for i in range(20_000)}}}
    code, answer = post_raw(f"{server.base}/generate", json.dumps(many).encode(), JSON)
    assert code == 400 and "at most 64" in answer["error"]["message"], answer


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed response (HTTP 200), checking it ends with ``[DONE]``."""
    request = urllib.request.Request(
        url,
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json", SECRET_HEADER: SECRET},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        lines = [line.decode().strip() for line in response if line.strip()]
    assert lines[-1] == "data: [DONE]", lines
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_a_streamed_rejection_carries_the_reason(server: Server) -> None:
    """Streamed, SGLang has sent HTTP 200 before the scheduler decides: the native API
    ends with SGLang's abort finish reason (status 503 and the reason), the OpenAI API with
    an error event, as the non-streamed 503 says (docs/trust.md lists every engine's)."""
    why = "rejected: prompt of 100 tokens > 64"
    body = {"input_ids": [7] * 100, "sampling_params": {"max_new_tokens": 2}}
    (event,) = _stream(f"{server.base}/generate", body)
    finish = event["meta_info"]["finish_reason"]
    assert finish == {"type": "abort", "status_code": 503, "message": why}, event
    assert event["output_ids"] == []
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(f"{server.base}/generate", body)
    assert error.value.code == 503
    detail = json.load(error.value)
    assert (detail["message"], detail["code"]) == (why, 503), detail
    openai = {"model": "m", "prompt": [7] * 100, "max_tokens": 2}
    (event,) = _stream(f"{server.base}/v1/completions", openai)
    assert event["error"]["message"] == why and event["error"]["code"] == 503, event
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(f"{server.base}/v1/completions", openai)
    assert error.value.code == 503
    assert json.load(error.value)["message"] == why


def test_the_dashboards_sglang_and_schedkit_series_are_served(server: Server) -> None:
    """Every sglang:* family deploy/grafana/schedkit.json queries is one this server
    declares on /metrics, and so are the schedkit_* families that have series from the
    start (tests/test_observability.py checks all of them against schedkit's names)."""
    import re

    dashboard = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "schedkit.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"]
             for t in p.get("targets", [])]  # fmt: skip
    used = {m for e in exprs for m in re.findall(r"\b((?:sglang:|schedkit_)[a-z_:]+)", e)}
    with urllib.request.urlopen(f"{server.base}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()

    def family(name: str) -> str:
        return re.sub(r"_(total|bucket|sum|count)$", "", name)

    declared = {family(line.split()[2]) for line in lines if line.startswith("# TYPE ")}
    # the retraction counter gets its first series on the first retraction
    sglang = {family(m) for m in used if m.startswith("sglang:")}
    sglang -= {"sglang:num_retracted_requests"}
    assert sglang and sglang <= declared, sorted(sglang - declared)
    ours = {family(m) for m in used if m.startswith("schedkit_")}
    ours -= {"schedkit_rejections", "schedkit_policy_errors", "schedkit_hook_over_budget"}
    assert ours and ours <= declared, sorted(ours - declared)


def test_sigterm_is_passed_on_and_stops_the_server(server: Server) -> None:
    """Last of the server tests: it stops the module's server."""
    server.process.send_signal(signal.SIGTERM)  # to schedkit serve only, not its group
    try:
        server.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server still running 60 s after SIGTERM:\n{_tail(server.log)}")
    deadline = time.monotonic() + 30
    while _group_alive(server.process.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _group_alive(server.process.pid), "SGLang processes left after SIGTERM"


def test_unknown_policy_is_refused_before_launch(model_dir: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [
            SCHEDKIT,
            "serve",
            "sglang",
            "--policy",
            "no-such-policy",
            "--",
            *_engine_args(model_dir, _free_port()),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode != 0
    assert time.monotonic() - started < 30  # refused by schedkit, not after loading SGLang
    message = result.stdout + result.stderr
    assert "no-such-policy" in message
    assert "fcfs" in message and "priority" in message  # the installed policies
    assert "sglang.launch_server" not in message  # never launched
