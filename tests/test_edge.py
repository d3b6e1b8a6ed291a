"""The HTTP edge reads a body only as every engine does, or refuses it (issue #35):
encodings, byte-order marks, nesting, duplicate keys, NaN/Infinity, huge numbers and lone
surrogates; its bounds (413/400); the gateway's tenant header; the seal it puts on its
decision (``schedkit.seal``) and what the scheduler makes of metadata without one.

The engines' own readers are the judges: Starlette's ``Request.json`` (vLLM's and
LMDeploy's FastAPI servers) and orjson (SGLang's ``ORJSONRequest``)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from schedkit.edge import GATEWAY_SECRET_VAR, TrustMiddleware, rewrite_fields
from schedkit.edge.serving import run_server
from schedkit.edge.strict_json import BodyError, read_body
from schedkit.errors import PolicyConfigError
from schedkit.seal import EDGE_KEY_VAR, SEAL_KEY, Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig

KEY = "k" * 32
Headers = list[tuple[bytes, bytes]]


def starlette_json(raw: bytes) -> Any:
    """What vLLM's and LMDeploy's endpoints read: Starlette's ``Request.json()``."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def read() -> Any:
        return await Request({"type": "http", "method": "POST", "headers": []}, receive).json()

    return asyncio.run(read())


ENGINE_READERS: dict[str, Callable[[bytes], Any]] = {
    "starlette (vLLM, LMDeploy)": starlette_json,
    "orjson (SGLang)": orjson.loads,
}


def _xargs(
    trust: TrustConfig, header: str | None, body: dict[str, Any], path: str, seal: Any = None
) -> Any:
    return rewrite_fields(trust, header, body, "xargs", body, "xargs", seal)


def _keep(*args: Any) -> list[Any]:
    return []  # the body as read, so forwarded == what the engine reads of the original


def call(
    body: bytes,
    headers: Headers = (),  # type: ignore[assignment]
    trust: TrustConfig = DEFAULT_TRUST,
    rewrite: Callable[..., Any] = _xargs,
    client: tuple[str, int] | None = ("127.0.0.1", 5000),
    chunks: int = 1,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the middleware over a recording app: (what the app saw, messages sent)."""
    seen: dict[str, Any] = {}
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen["body"] = message["body"]
        seen["headers"] = list(scope["headers"])

    step = max(1, -(-len(body) // chunks))
    parts = [body[i : i + step] for i in range(0, len(body), step)] or [b""]

    async def receive() -> dict[str, Any]:
        part = parts.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(parts)}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/completions",
        "headers": list(headers),
        "client": client,
    }
    asyncio.run(TrustMiddleware(app, trust, rewrite)(scope, receive, send))
    return seen, sent


def status(sent: list[dict[str, Any]]) -> int:
    return int(sent[0]["status"]) if sent else 200


def error(sent: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(json.loads(sent[1]["body"])["error"])


def same(a: Any, b: Any) -> bool:
    """Equal as values and types (1 is not 1.0, key order aside)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


# -- the property: what the edge forwards, every engine reads as the edge did ------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
HAZARDS = [
    lambda t: t,
    lambda t: '{"a": 1, "a": ' + t + "}",  # a duplicate key
    lambda t: "[" + t + ", NaN]",
    lambda t: "[" + t + ", -Infinity]",
    lambda t: "[" + t + ', "\\ud800"]',  # a lone surrogate
    lambda t: "[" + t + ', "\\ud83d\\ude00"]',  # a pair: fine
    lambda t: "[" + t + ", 1e400]",
    lambda t: "[" + t + ", 18446744073709551616]",
    lambda t: "[" + t + ", -9223372036854775809]",
    lambda t: "[" + t + ", 1" + "0" * 5000 + "]",  # over int()'s digit limit
]
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=values,
    ascii_only=st.booleans(),
    hazard=st.sampled_from(range(len(HAZARDS))),
    depth=st.sampled_from([0, 1, 100, 127, 129, 600, 999, 1010, 1023, 1100]),
    encoding=st.sampled_from(ENCODINGS),
)
def test_what_the_edge_forwards_every_engine_reads_as_the_edge_did(
    value: Any, ascii_only: bool, hazard: int, depth: int, encoding: str
) -> None:
    text = HAZARDS[hazard](json.dumps(value, ensure_ascii=ascii_only))
    text = "[" * depth + text + "]" * depth
    raw = text.encode(encoding)
    seen, sent = call(raw, rewrite=_keep)
    if sent:  # refused: nothing reached the engine
        assert status(sent) == 400 and "body" not in seen
        return
    forwarded = seen["body"]
    edge_value = read_body(forwarded, DEFAULT_TRUST.max_body_depth)
    for name, reader in ENGINE_READERS.items():
        assert same(reader(forwarded), edge_value), name  # reads what the edge decided on
        try:
            original = reader(raw)
        except (ValueError, RecursionError):
            continue  # the engine would have refused the original itself
        assert same(original, edge_value), f"{name} reads the original differently"


@settings(max_examples=200, deadline=None)
@given(value=values.filter(lambda v: "\x00" not in json.dumps(v, ensure_ascii=False)))
def test_honest_utf8_json_is_always_forwarded(value: Any) -> None:
    ints = [v for v in _leaves(value) if type(v) is int]
    if any(not -(2**63) <= v <= 2**64 - 1 for v in ints):
        return  # outside orjson's range: refused by design
    for ascii_only in (True, False):
        seen, sent = call(json.dumps(value, ensure_ascii=ascii_only).encode(), rewrite=_keep)
        assert sent == [] and same(json.loads(seen["body"]), value)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


# -- the attacks of issue #35, at the edge -----------------------------------------------

CLAIMS = {"prompt": "hi", "priority": -1000, "xargs": {"tenant": "premium", "slo_ttft_ms": 1}}


@pytest.mark.parametrize(
    "encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]
)
def test_bodies_in_other_encodings_are_refused(encoding: str) -> None:
    raw = json.dumps(CLAIMS).encode(encoding)
    assert starlette_json(raw) == CLAIMS  # what vLLM would have read, edge or not
    seen, sent = call(raw, trust=TrustConfig(tenant_from_body=True))
    assert status(sent) == 400 and seen == {}
    assert error(sent)["param"] == "body", error(sent)
    assert "UTF-8" in error(sent)["message"]


def test_a_body_nested_past_the_bound_is_refused_with_the_limit() -> None:
    field = '{"x": ' * 1010 + "1" + "}" * 1010  # one extra field, 1,011 levels deep
    raw = ('{"prompt": "hi", "deep": ' + field + ', "xargs": {"tenant": "premium"}}').encode()
    assert orjson.loads(raw)["xargs"]["tenant"] == "premium"  # what SGLang would have read
    seen, sent = call(raw, trust=TrustConfig(tenant_from_body=True))
    assert status(sent) == 400 and seen == {}
    assert "nested more than 128 levels" in error(sent)["message"]
    nested = {"a": [[[[1]]]]}
    assert status(call(json.dumps(nested).encode(), trust=TrustConfig(max_body_depth=4))[1]) == 400
    assert status(call(json.dumps(nested).encode(), trust=TrustConfig(max_body_depth=5))[1]) == 200


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"xargs": {"tenant": "a"}, "xargs": {"tenant": "b"}}', "appears twice"),
        (b'{"max_tokens": NaN}', "NaN is not JSON"),
        (b'{"max_tokens": Infinity}', "Infinity is not JSON"),
        (b'{"max_tokens": 1e400}', "out of range"),
        (b'{"max_tokens": 18446744073709551616}', "outside [-2**63, 2**64 - 1]"),
        (b'{"prompt": "\\udc00"}', "lone surrogate"),
        (b'{"prompt": "\xff"}', "not UTF-8"),
        (b"not json", "not valid JSON"),
    ],
)
def test_bodies_the_engines_read_differently_are_refused(raw: bytes, says: str) -> None:
    seen, sent = call(raw)
    assert status(sent) == 400 and seen == {}
    assert says in error(sent)["message"], error(sent)


def test_a_form_body_passes_as_it_is_but_json_sent_as_a_form_does_not() -> None:
    form = [(b"content-type", b"multipart/form-data; boundary=x")]
    raw = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n'
    seen, sent = call(raw, form)
    assert sent == [] and seen["body"] == raw
    seen, sent = call(json.dumps(CLAIMS).encode("utf-16"), form)
    assert status(sent) == 400 and seen == {}


# -- bounds --------------------------------------------------------------------------


def test_a_declared_length_over_the_bound_gets_413_before_the_body_is_read() -> None:
    trust = TrustConfig(max_body_bytes=1024)
    seen, sent = call(b"{}", [(b"content-length", b"5000")], trust=trust)
    assert status(sent) == 413 and seen == {}
    assert (
        error(sent)["type"] == "RequestTooLargeError" and "at most 1024" in error(sent)["message"]
    )


def test_a_streamed_body_over_the_bound_gets_413() -> None:
    raw = json.dumps({"prompt": "x" * 5000}).encode()
    seen, sent = call(raw, trust=TrustConfig(max_body_bytes=1024), chunks=8)
    assert status(sent) == 413 and seen == {}
    assert status(call(raw, trust=TrustConfig(max_body_bytes=8192), chunks=8)[1]) == 200


def test_metadata_with_too_many_keys_or_bytes_gets_400_naming_it() -> None:
    many = {"xargs": {f"k{i}": i for i in range(100_000)}}
    started = time.perf_counter()
    seen, sent = call(json.dumps(many).encode())
    elapsed = time.perf_counter() - started
    assert status(sent) == 400 and seen == {}
    assert error(sent)["param"] == "xargs" and "at most 64" in error(sent)["message"]
    print(f"100,000-key xargs refused in {elapsed * 1000:.0f} ms")
    long = {"xargs": {"note": "x" * 20_000}}
    assert "16384" in error(call(json.dumps(long).encode())[1])["message"]
    assert status(call(json.dumps({"xargs": {"note": "x" * 100}}).encode())[1]) == 200


# -- the tenant header: from the gateway only -----------------------------------------


def test_the_tenant_header_is_accepted_only_from_trusted_proxies() -> None:
    trust = TrustConfig(trusted_proxies=["10.0.0.0/8", "::1"])
    header = [(b"x-tenant-id", b"premium")]
    seen, sent = call(json.dumps(CLAIMS).encode(), header, trust, client=("192.168.1.5", 1))
    assert status(sent) == 403 and seen == {}
    assert error(sent)["param"] == "header x-tenant-id"
    seen, sent = call(json.dumps(CLAIMS).encode(), header, trust, client=("10.1.2.3", 1))
    assert sent == [] and json.loads(seen["body"])["xargs"]["tenant"] == "premium"
    assert status(call(b"{}", header, trust, client=("::1", 1))[1]) == 200
    assert status(call(b"{}", header, trust, client=None)[1]) == 403  # a unix socket
    seen, sent = call(b"{}", [], trust, client=("192.168.1.5", 1))  # no header: default
    assert sent == [] and json.loads(seen["body"]) == {}


def test_the_tenant_header_needs_the_gateway_secret_when_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trust = TrustConfig(gateway_secret_header="X-Gateway-Secret")
    monkeypatch.delenv(GATEWAY_SECRET_VAR, raising=False)
    with pytest.raises(PolicyConfigError, match=GATEWAY_SECRET_VAR):
        call(b"{}", [], trust)
    monkeypatch.setenv(GATEWAY_SECRET_VAR, "s3cret-s3cret")
    header = (b"x-tenant-id", b"premium")
    assert status(call(b"{}", [header], trust)[1]) == 403
    assert status(call(b"{}", [header, (b"x-gateway-secret", b"wrong")], trust)[1]) == 403
    seen, sent = call(b"{}", [header, (b"X-Gateway-Secret", b"s3cret-s3cret")], trust)
    assert sent == [] and json.loads(seen["body"])["xargs"]["tenant"] == "premium"
    assert all(k.lower() != b"x-gateway-secret" for k, _ in seen["headers"])  # not sent on


def test_a_repeated_tenant_header_is_refused() -> None:
    headers = [(b"x-tenant-id", b"premium"), (b"X-Tenant-Id", b"acme")]
    _, sent = call(b"{}", headers)
    assert status(sent) == 400 and "appears 2 times" in error(sent)["message"]


def test_the_launch_log_says_when_anyone_can_set_the_header(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="schedkit"):
        call(b"{}")
    assert "any client reaching this port can set the tenant header x-tenant-id" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="schedkit"):
        call(b"{}", trust=TrustConfig(trusted_proxies=["127.0.0.1"]))
    assert "any client reaching" not in caplog.text


# -- the seal ------------------------------------------------------------------------


def test_the_edge_seals_its_decision_and_the_seal_binds_the_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EDGE_KEY_VAR, KEY)
    trust = TrustConfig(tenant_from_body=True, slo_from_body=True)
    body = {"prompt": "hi", "xargs": {"tenant": "gold", "slo_ttft_ms": 300, "other": 1}}
    seen, _ = call(json.dumps(body).encode(), trust=trust)
    xargs = json.loads(seen["body"])["xargs"]
    seal = Seal(KEY)
    assert seal.verify(xargs) and xargs["other"] == 1
    assert not seal.verify({**xargs, "tenant": "platinum"})
    assert not seal.verify({**xargs, "slo_ttft_ms": 1})
    assert not Seal("another key of 32 characters ok").verify(xargs)
    forged = {"tenant": "gold", SEAL_KEY: xargs[SEAL_KEY] + "0"}
    assert not seal.verify(forged)
    seen, _ = call(b"{}", trust=trust)  # no metadata: sealed defaults all the same
    assert seal.verify(json.loads(seen["body"])["xargs"])
    claimed = {"xargs": {"tenant": "gold", SEAL_KEY: "f" * 64}}  # a client's own "seal"
    seen, _ = call(json.dumps(claimed).encode(), trust=DEFAULT_TRUST)
    xargs = json.loads(seen["body"])["xargs"]
    assert xargs["tenant"] == "default" and xargs[SEAL_KEY] != "f" * 64 and seal.verify(xargs)


def test_unsealed_metadata_is_a_client_claim_in_the_scheduler() -> None:
    claims = {"tenant": "premium", "slo_ttft_ms": 1}
    vouched = DEFAULT_TRUST.bound(claims, -1000)
    assert (vouched.tenant, vouched.slo_ttft_ms, vouched.priority) == ("premium", 1, -1000)
    claim = DEFAULT_TRUST.bound(claims, -1000, vouched=False)
    assert (claim.tenant, claim.slo_ttft_ms, claim.priority) == ("default", None, 0)
    assert DEFAULT_TRUST.bound_priority(-1000, "default", vouched=False) == 0
    tiers = TrustConfig(tenant_priority={"default": 3})
    assert tiers.bound_priority(-1000, "default", vouched=False) == 3
    open_ = TrustConfig(tenant_from_body=True, priority_from_body=True, slo_from_body=True)
    claim = open_.bound(claims, -5000, vouched=False)  # as a body may claim, in bounds
    assert (claim.tenant, claim.slo_ttft_ms, claim.priority) == ("premium", 1, -1000)
    assert open_.bound_priority(-5000, "premium", vouched=False) == -1000


def test_schedkit_serve_gives_each_server_an_edge_key(tmp_path: Path) -> None:
    out = tmp_path / "key"
    script = f"import os; open({str(out)!r}, 'w').write(os.environ[{EDGE_KEY_VAR!r}])"
    env = {k: v for k, v in os.environ.items() if k != EDGE_KEY_VAR}
    assert run_server([sys.executable, "-c", script], env) == 0
    first = out.read_text()
    assert len(first) == 64 and Seal.from_environ({EDGE_KEY_VAR: first}) is not None
    assert run_server([sys.executable, "-c", script], env) == 0
    assert out.read_text() != first  # a new key per launch
    assert run_server([sys.executable, "-c", script], {**env, EDGE_KEY_VAR: KEY}) == 0
    assert out.read_text() == KEY  # the operator's own, for several hosts


def test_a_short_edge_key_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        Seal.from_environ({EDGE_KEY_VAR: "short"})


def test_read_body_refuses_with_body_error() -> None:
    with pytest.raises(BodyError):
        read_body(b"\xef\xbb\xbf{}", 128)
