"""vLLM's real OpenAI server launched by ``schedkit serve vllm`` (tiny random-weight Llama).

Each server runs in its own session (process group) and is killed in a ``finally``;
every wait is bounded.
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
from pathlib import Path
from typing import Any

import pytest
from schedkit.testing.http import post_headers_only, post_raw

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")
STARTUP_S = 150  # healthy in ~45 s on an idle 2-core machine; CI boxes are slower
MAX_TOKENS = 6
POLICY = "priority+test-echo-metadata"  # the second from tests/site, on PYTHONPATH
ECHO_PROMPT = 17  # prompts of this length are rejected with their metadata as the reason
# The server's trust config: the tenant header counts only with the gateway's secret
# (every request of these tests comes "through the gateway" unless a test says otherwise).
SECRET_HEADER, SECRET = "x-gateway-secret", "gateway-secret-for-tests"
BODY_LIMIT = 1 << 20
CONFIG = f"""policy = ["priority", "test-echo-metadata"]
[trust]
gateway_secret_header = "{SECRET_HEADER}"
max_body_bytes = {BODY_LIMIT}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _engine_args(model: Path, port: int) -> list[str]:
    return [
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "256",
        "--max-num-seqs",
        "8",
        "--enforce-eager",  # the tiny model's word tokenizer serves chat; prompts are token ids
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    site = str(Path(__file__).with_name("site"))
    env["PYTHONPATH"] = os.pathsep.join([site, env.get("PYTHONPATH", "")])
    env.pop("SCHEDKIT_CONFIG", None)
    env.pop("SCHEDKIT_TRUST", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # schedkit serve makes a fresh one
    env.pop("SCHEDKIT_EDGE_KEY", None)  # schedkit serve makes one per launch
    env["SCHEDKIT_GATEWAY_SECRET"] = SECRET
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


def _wait_healthy(
    process: subprocess.Popen[bytes], base: str, log: Path, path: str = "/health"
) -> None:
    """Until ``base + path`` answers 200; fails with the log's tail if the server exits or
    is not healthy within ``STARTUP_S``."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{base}{path}", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server not healthy after {STARTUP_S} s:\n{_tail(log)}")
        time.sleep(1)


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    config = log.with_name("schedkit.toml")
    config.write_text(CONFIG)
    command = [SCHEDKIT, "serve", "vllm", "--policy", str(config), "--"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command + _engine_args(tiny_model, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, base, log)
        yield base
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


def _seen(server: str, model: Path, extra: dict[str, Any], headers: dict[str, str]) -> str:
    """What the scheduler saw of a request: the echo policy's rejection reason."""
    body = {"model": str(model), "prompt": [3] * ECHO_PROMPT, "max_tokens": 2, **extra}
    choice = _post(f"{server}/v1/completions", body, headers)["choices"][0]
    assert choice["finish_reason"] == "abort", choice
    return str(choice["stop_reason"])


def test_body_tenant_is_ignored_and_the_header_wins(server: str, tiny_model: Path) -> None:
    """The trust middleware (added by schedkit serve vllm) with the default config."""
    body = {"vllm_xargs": {"tenant": "victim"}}
    seen = _seen(server, tiny_model, body, {"X-Tenant-Id": "acme"})
    assert seen.startswith("rejected: tenant=acme "), seen
    assert "tenant=default " in _seen(server, tiny_model, body, {})


def test_hostile_priority_is_ignored(server: str, tiny_model: Path) -> None:
    seen = _seen(server, tiny_model, {"priority": -(2**63)}, {"x-tenant-id": "acme"})
    assert "priority=0 " in seen, seen
    seen = _seen(server, tiny_model, {"vllm_xargs": {"slo_ttft_ms": 300}}, {})
    assert "slo_ttft_ms=None " in seen, seen  # SLO targets come from the body only if allowed


def test_nan_slo_gets_400_naming_the_field(server: str, tiny_model: Path) -> None:
    body = json.dumps(
        {"model": str(tiny_model), "prompt": [3] * 8, "max_tokens": 2, "vllm_xargs": {}}
    ).replace('"vllm_xargs": {}', '"vllm_xargs": {"slo_ttft_ms": "NaN"}')
    with pytest.raises(urllib.error.HTTPError) as caught:
        _post(f"{server}/v1/completions", body)
    assert caught.value.code == 400
    error = json.load(caught.value)["error"]
    assert error["param"] == "vllm_xargs.slo_ttft_ms", error
    assert "slo_ttft_ms" in error["message"]
    with pytest.raises(urllib.error.HTTPError) as caught:
        _post(f"{server}/v1/completions", body, {"x-tenant-id": "x" * 1000})
    assert caught.value.code == 400


# The attacks of issue #35: each got the client's claims to the policy before the edge
# read bodies as the engine does; each is now refused, or grants nothing.


def _claims(model: Path) -> dict[str, Any]:
    return {
        "model": str(model),
        "prompt": [3] * ECHO_PROMPT,
        "max_tokens": 2,
        "priority": -1000,
        "vllm_xargs": {"tenant": "premium", "slo_ttft_ms": 1},
    }


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32", "utf-32-le"])
def test_bodies_in_other_encodings_are_refused(
    server: str, tiny_model: Path, encoding: str
) -> None:
    data = json.dumps(_claims(tiny_model)).encode(encoding)
    code, answer = post_raw(f"{server}/v1/completions", data, {"Content-Type": "application/json"})
    assert code == 400, answer  # vLLM itself reads these (json.loads detects encodings)
    assert answer["error"]["param"] == "body" and "UTF-8" in answer["error"]["message"]


def test_a_body_nested_past_the_bound_is_refused(server: str, tiny_model: Path) -> None:
    deep = '{"x": ' * 1010 + "1" + "}" * 1010
    data = json.dumps(_claims(tiny_model))[:-1] + ', "deep": ' + deep + "}"
    code, answer = post_raw(
        f"{server}/v1/completions", data.encode(), {"Content-Type": "application/json"}
    )
    assert code == 400 and "nested more than 128 levels" in answer["error"]["message"], answer


def test_a_spoofed_tenant_header_is_refused_without_the_gateway_secret(
    server: str, tiny_model: Path
) -> None:
    data = json.dumps(_claims(tiny_model)).encode()
    headers = {"Content-Type": "application/json", "x-tenant-id": "premium"}
    code, answer = post_raw(f"{server}/v1/completions", data, headers)
    assert code == 403 and answer["error"]["param"] == "header x-tenant-id", answer
    seen = _seen(server, tiny_model, {}, {"x-tenant-id": "premium"})  # through the gateway
    assert seen.startswith("rejected: tenant=premium "), seen


def test_bodies_over_the_bound_get_413_and_huge_metadata_400(server: str, tiny_model: Path) -> None:
    url = f"{server}/v1/completions"
    code, answer = post_headers_only(server, "/v1/completions", BODY_LIMIT + 1)
    assert code == 413 and answer["error"]["code"] == 413, answer
    keys = {**_claims(tiny_model), "vllm_xargs": {f"k{i}": i for i in range(20_000)}}
    code, answer = post_raw(url, json.dumps(keys).encode(), {"Content-Type": "application/json"})
    assert code == 400 and answer["error"]["param"] == "vllm_xargs", answer
    assert "at most 64" in answer["error"]["message"]  # timed in benchmarks/policies/edge_cost.py


@pytest.fixture(scope="module")
def edgeless(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's server with schedkit's scheduler and an edge key but no edge: every request
    reaches the scheduler unsealed, as one that stepped around the edge would."""
    port = _free_port()
    log = tmp_path_factory.mktemp("edgeless-log") / "server.log"
    extra = {"schedkit": {"policy": ["priority", "test-echo-metadata"]}}
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *_engine_args(tiny_model, port),
        "--scheduler-cls",
        "schedkit_vllm.Scheduler",
        "--additional-config",
        json.dumps(extra),
    ]
    env = dict(_env(), SCHEDKIT_EDGE_KEY="an-edge-key-no-client-knows-0123")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, base, log)
        yield base
    finally:
        _kill(process)


def test_metadata_that_skipped_the_edge_grants_nothing(edgeless: str, tiny_model: Path) -> None:
    claims = _claims(tiny_model)
    seen = _seen(edgeless, tiny_model, {k: claims[k] for k in ("priority", "vllm_xargs")}, {})
    assert seen.startswith("rejected: tenant=default priority=0 slo_ttft_ms=None "), seen


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed response, checking it ends with ``[DONE]``."""
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


def _finishes(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [
        (c["finish_reason"], c.get("stop_reason"))
        for e in events
        for c in e["choices"]
        if c.get("finish_reason")
    ]


def test_streamed_completion_rejection_has_finish_and_reason(server: str, tiny_model: Path) -> None:
    body = {"model": str(tiny_model), "prompt": [3] * ECHO_PROMPT, "max_tokens": 2}
    plain = _post(f"{server}/v1/completions", body)["choices"][0]
    events = _stream(f"{server}/v1/completions", body)
    assert _finishes(events) == [("abort", plain["stop_reason"])], events
    assert plain["stop_reason"].startswith("rejected: tenant=default "), plain
    assert events[-1]["id"].startswith("cmpl-") and events[-1]["choices"][0]["text"] == ""
    # With usage requested, the finish chunk comes before the usage chunk.
    usage = {**body, "stream_options": {"include_usage": True}}
    events = _stream(f"{server}/v1/completions", usage)
    assert [bool(e["choices"]) for e in events] == [True, False], events
    assert events[-1]["usage"]["completion_tokens"] == 0


def test_streamed_chat_rejection_has_finish_and_reason(server: str, tiny_model: Path) -> None:
    def chat(words: int) -> dict[str, Any]:
        content = " ".join(["t3"] * words)
        return {
            "model": str(tiny_model),
            "messages": [{"role": "user", "content": content}],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
        }

    events = _stream(f"{server}/v1/chat/completions", chat(ECHO_PROMPT))
    ((finish, reason),) = _finishes(events)
    assert finish == "abort" and reason.startswith("rejected: tenant=default "), events
    assert events[-1]["object"] == "chat.completion.chunk"
    assert events[-1]["id"] == events[0]["id"]  # the stream's own id
    # An admitted chat streams as stock vLLM does: one finish, nothing added.
    assert _finishes(_stream(f"{server}/v1/chat/completions", chat(ECHO_PROMPT - 1))) == [
        ("length", None)
    ]


def test_streamed_completion_that_runs_is_unchanged(server: str, tiny_model: Path) -> None:
    body = {
        "model": str(tiny_model),
        "prompt": [4] * 9,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
    }
    events = _stream(f"{server}/v1/completions", body)
    assert _finishes(events) == [("length", None)]
    assert sum(1 for e in events if e["choices"][0]["text"]) >= 1


def test_server_serves_priority_and_tenant(server: str, tiny_model: Path) -> None:
    for i in range(4):
        body = {
            "model": str(tiny_model),
            "prompt": [5 + i] * (8 + i),
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "priority": i % 2,
            "vllm_xargs": {"tenant": f"t{i % 2 + 1}"},
        }
        result = _post(f"{server}/v1/completions", body)
        assert result["choices"][0]["finish_reason"] == "length"
        assert result["usage"]["completion_tokens"] == MAX_TOKENS


def test_metrics_endpoint_has_schedkit_metrics(server: str, tiny_model: Path) -> None:
    _post(
        f"{server}/v1/completions",
        {"model": str(tiny_model), "prompt": [9] * 12, "max_tokens": 2, "priority": 1},
    )
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("schedkit_"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    # The scheduler (in the engine-core process) observed order_waiting calls.
    key = f'schedkit_hook_latency_seconds_count{{hook="order_waiting",policy="{POLICY}"}}'
    assert samples.get(key, 0) >= 1, "\n".join(sorted(samples)) or text[-2000:]
    assert f'schedkit_preemption_victims_total{{policy="{POLICY}"}}' in samples
    assert "vllm:num_requests_running" in text  # vLLM's own metrics still served


def test_unknown_policy_is_refused_before_launch(tiny_model: Path) -> None:
    result = subprocess.run(
        [
            SCHEDKIT,
            "serve",
            "vllm",
            "--policy",
            "no-such-policy",
            "--",
            *_engine_args(tiny_model, _free_port()),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert "no-such-policy" in message
    assert "fcfs" in message and "priority" in message  # the installed policies


def test_unknown_policy_in_additional_config_stops_the_engine(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Straight through vLLM's server (no schedkit CLI check): the engine core refuses."""
    log = tmp_path / "server.log"
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *_engine_args(tiny_model, _free_port()),
        "--scheduler-cls",
        "schedkit_vllm.Scheduler",
        "--additional-config",
        json.dumps({"schedkit": {"policy": ["no-such-policy"]}}),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True
        )
    try:
        process.wait(timeout=STARTUP_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server still running after {STARTUP_S} s:\n{_tail(log)}")
    finally:
        _kill(process)
    message = log.read_text(errors="replace")
    assert process.returncode != 0
    assert "no-such-policy" in message
    assert "fcfs" in message and "priority" in message, _tail(log)


# -- the command line, without launching ------------------------------------------------


def test_command_merges_additional_config_and_picks_the_class() -> None:
    from schedkit import load_config
    from schedkit.errors import SchedkitError

    from schedkit_vllm.serve import build_command

    config = load_config("priority")
    args = ["--model", "m", "--additional-config", '{"other": 1}']
    command = build_command(config, args, cpu=True, python="py")
    assert command[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert command[3:5] == ["--model", "m"]
    assert command[-4:-2] == ["--scheduler-cls", "schedkit_vllm.Scheduler"]
    assert command[-6:-4] == ["--middleware", "schedkit_vllm.trust.TrustMiddleware"]
    merged = json.loads(command[-1])
    assert merged == {
        "other": 1,
        "schedkit": {
            "policy": ["priority"],
            "options": {},
            "record_steps": None,
            "hook_budget_ms": None,
            "hook_budget_hard": False,
        },
    }
    assert command.count("--additional-config") == 1

    gpu = build_command(config, ["--model", "m"], cpu=False)
    assert gpu[-4:-2] == ["--scheduler-cls", "schedkit_vllm.AsyncScheduler"]
    assert "--async-scheduling" in gpu
    sync = build_command(config, ["--model", "m", "--no-async-scheduling"], cpu=False)
    assert sync[-4:-2] == ["--scheduler-cls", "schedkit_vllm.Scheduler"]

    given = build_command(config, ["--middleware", "schedkit_vllm.trust.TrustMiddleware"], cpu=True)
    assert given.count("schedkit_vllm.trust.TrustMiddleware") == 1
    trusted = load_config({"policy": "priority", "trust": {"tenant_from_body": True}})
    section = json.loads(build_command(trusted, [], cpu=True)[-1])["schedkit"]
    assert section["trust"]["tenant_from_body"] is True

    with pytest.raises(SchedkitError, match="schedkit"):
        build_command(config, ["--additional-config", '{"schedkit": {}}'], cpu=True)
    with pytest.raises(SchedkitError, match="scheduler-cls"):
        build_command(config, ["--scheduler-cls", "my.Sched"], cpu=True)


def test_the_dashboards_vllm_and_schedkit_series_are_served(server: str) -> None:
    """Every vllm:* family deploy/grafana/schedkit.json queries is one this server declares
    on /metrics (its ``# TYPE`` lines; gauges get samples only once vLLM logs stats), and
    so are the schedkit_* families that have series from the start
    (tests/test_observability.py checks all of them against schedkit's own names)."""
    import re

    dashboard = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "schedkit.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"]
             for t in p.get("targets", [])]  # fmt: skip
    used = {m for e in exprs for m in re.findall(r"\b((?:vllm:|schedkit_)[a-z_:]+)", e)}
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()

    def family(name: str) -> str:
        return re.sub(r"_(total|bucket|sum|count)$", "", name)

    # a counter's TYPE line names it with _total in prometheus_client's multiprocess mode
    declared = {family(line.split()[2]) for line in lines if line.startswith("# TYPE ")}

    vllm = {family(m) for m in used if m.startswith("vllm:")}
    assert vllm and vllm <= declared, sorted(vllm - declared)
    # schedkit's families with series from the start (the others get theirs on a first
    # rejection, error or slow call)
    ours = {family(m) for m in used if m.startswith("schedkit_")}
    ours -= {"schedkit_rejections", "schedkit_policy_errors", "schedkit_hook_over_budget"}
    assert ours and ours <= declared, sorted(ours - declared)
