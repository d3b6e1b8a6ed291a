"""The trust edge on LMDeploy's api_server app (issue #35): the middleware as LMDeploy's
own ``mount_metrics`` adds it (``carrier.install_api``), served by uvicorn on loopback,
in front of an endpoint that reads its body as LMDeploy's FastAPI endpoints do and answers
with what it read. LMDeploy's engine cannot run on CPU, so the endpoint stands in for its
generation routes; the edge, the app and the HTTP server are the real ones."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from schedkit.seal import EDGE_KEY_VAR, SEAL_KEY, Seal
from schedkit.trust import TrustConfig

from schedkit_lmdeploy import carrier

SECRET_HEADER, SECRET = "x-gateway-secret", "gateway-secret-for-tests"
KEY = "an-edge-key-of-32-characters-000"
CLAIMS = {"model": "m", "prompt": "hi", "schedkit": {"tenant": "premium", "priority": -5}}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import uvicorn
    from fastapi import FastAPI, Request
    from lmdeploy.serve.openai import api_server

    patch = pytest.MonkeyPatch()
    patch.setenv(EDGE_KEY_VAR, KEY)
    patch.setenv("SCHEDKIT_GATEWAY_SECRET", SECRET)
    trust = TrustConfig(gateway_secret_header=SECRET_HEADER, max_body_bytes=1 << 16)
    carrier._DONE.discard("api")  # install with this config, as the api_server process does
    carrier.install_api(trust)
    app = FastAPI()
    api_server.mount_metrics(app, SimpleNamespace(enable_metrics=False))

    async def completions(request: Request) -> dict[str, Any]:
        return {"read": await request.json()}

    completions.__annotations__["request"] = Request  # a string under __future__ annotations
    app.post("/v1/completions")(completions)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(10)
        carrier._DONE.discard("api")
        patch.undo()


def send(base: str, data: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{base}/v1/completions", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(json.load(response))
    except urllib.error.HTTPError as error:
        return error.code, dict(json.load(error))


def test_a_body_through_the_gateway_is_rewritten_and_sealed(server: str) -> None:
    headers = {**JSON, "x-tenant-id": "gold", SECRET_HEADER: SECRET}
    code, answer = send(server, json.dumps(CLAIMS).encode(), headers)
    assert code == 200, answer
    meta = answer["read"]["schedkit"]
    assert meta["tenant"] == "gold" and "priority" not in meta  # the body decides nothing
    assert Seal(KEY).verify(meta) and meta[SEAL_KEY]


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_bodies_in_other_encodings_are_refused(server: str, encoding: str) -> None:
    code, answer = send(server, json.dumps(CLAIMS).encode(encoding), JSON)
    assert code == 400 and answer["error"]["param"] == "body", answer


def test_a_deep_body_is_refused(server: str) -> None:
    deep = '{"x": ' * 1010 + "1" + "}" * 1010
    data = (json.dumps(CLAIMS)[:-1] + ', "deep": ' + deep + "}").encode()
    code, answer = send(server, data, JSON)
    assert code == 400 and "nested more than 128" in answer["error"]["message"], answer


def test_a_spoofed_tenant_header_is_refused(server: str) -> None:
    code, answer = send(server, json.dumps(CLAIMS).encode(), {**JSON, "x-tenant-id": "gold"})
    assert code == 403 and answer["error"]["param"] == "header x-tenant-id", answer


def test_bounds(server: str) -> None:
    big = json.dumps({**CLAIMS, "prompt": "x" * (1 << 16)}).encode()
    code, _ = send(server, big, JSON)  # uvicorn reads the small body whole before we answer
    assert code == 413
    many = {**CLAIMS, "schedkit": {f"k{i}": i for i in range(1000)}}
    code, answer = send(server, json.dumps(many).encode(), JSON)
    assert code == 400 and answer["error"]["param"] == "schedkit", answer


def test_unsealed_metadata_is_a_claim_in_the_scheduler() -> None:
    """LMDeploy's views with the edge key: the request's ``schedkit`` mapping without the
    edge's seal grants nothing (the sequence as ``contract.build_scheduler`` makes it)."""
    from schedkit.trust import DEFAULT_TRUST

    from schedkit_lmdeploy.views import LmdeployRequestView

    seal = Seal(KEY)
    claims = {"tenant": "premium", "priority": -5, "slo_ttft_ms": 1}
    sealed = {**claims, SEAL_KEY: seal.sign(claims)}
    seq = SimpleNamespace(meta=claims, session_id=1, num_all_ids=10, num_new_tokens=0)
    view = LmdeployRequestView(seq, 0.0, DEFAULT_TRUST, seal=seal)
    assert (view.tenant, view.priority, view.slo_ttft_ms) == ("default", 0, None)
    seq = SimpleNamespace(meta=sealed, session_id=2, num_all_ids=10, num_new_tokens=0)
    view = LmdeployRequestView(seq, 0.0, DEFAULT_TRUST, seal=seal)
    assert (view.tenant, view.priority, view.slo_ttft_ms) == ("premium", -5, 1.0)
