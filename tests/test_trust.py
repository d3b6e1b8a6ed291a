"""schedkit.trust: who may set tenant, priority and SLO targets, and their bounds; the
HTTP edge middleware (schedkit.edge); the simulator's replay of trace metadata."""

from __future__ import annotations

import asyncio
import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schedkit import PolicyFacade, load_config
from schedkit.bench.runner import trusted_requests
from schedkit.edge import TrustMiddleware, rewrite_fields
from schedkit.errors import PolicyConfigError
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model
from schedkit.sim.engine import SimEngine
from schedkit.trust import DEFAULT_TRUST, TenantSlo, TrustConfig
from schedkit.workload import TraceRequest

OPEN = TrustConfig(tenant_from_body=True, priority_from_body=True, slo_from_body=True)


def fields(problems: list[Any]) -> list[str]:
    return [p.field for p in problems]


# -- resolve: the defaults ignore the body ----------------------------------------------


def test_defaults_take_the_header_tenant_and_ignore_the_body() -> None:
    body = {"tenant": "victim", "slo_ttft_ms": 300, "slo_tpot_ms": 5}
    meta, problems = DEFAULT_TRUST.resolve("acme", body, -(2**63))
    assert problems == []
    assert (meta.tenant, meta.priority, meta.slo_ttft_ms, meta.slo_tpot_ms) == (
        "acme",
        0,
        None,
        None,
    )
    meta, _ = DEFAULT_TRUST.resolve(None, body, 5)
    assert meta.tenant == "default"


def test_body_tenant_when_allowed_but_the_header_still_wins() -> None:
    trust = TrustConfig(tenant_from_body=True)
    assert trust.resolve(None, {"tenant": "bob"}, None)[0].tenant == "bob"
    assert trust.resolve("acme", {"tenant": "bob"}, None)[0].tenant == "acme"
    assert trust.resolve("", {"tenant": "bob"}, None)[0].tenant == "bob"  # empty = absent


def test_allow_list_maps_unknown_tenants_to_the_default() -> None:
    trust = TrustConfig(tenants=["a", "b"], default_tenant="guest")
    assert trust.resolve("a", None, None)[0].tenant == "a"
    assert trust.resolve("zzz", None, None)[0].tenant == "guest"
    assert trust.bound({"tenant": "zzz"}, None).tenant == "guest"


def test_overlong_or_unprintable_tenants_are_problems_naming_the_field() -> None:
    _, problems = DEFAULT_TRUST.resolve("x" * 65, {"tenant": "y" * (1 << 20)}, None)
    assert fields(problems) == ["header x-tenant-id", "body.tenant", "body"]  # and too long
    assert "at most 64" in problems[0].message
    _, problems = DEFAULT_TRUST.resolve("a\nb", {"tenant": 7}, None, body_name="vllm_xargs")
    assert fields(problems) == ["header x-tenant-id", "vllm_xargs.tenant"]


def test_priority_from_body_is_clamped_and_validated() -> None:
    trust = TrustConfig(priority_from_body=True, priority_range=(-10, 10))
    assert trust.resolve(None, None, -(2**63))[0].priority == -10
    assert trust.resolve(None, None, 10**30)[0].priority == 10
    assert trust.resolve(None, None, 3.0)[0].priority == 3
    for bad in ("1", 1.5, math.nan, math.inf, True, [1]):
        assert fields(trust.resolve(None, None, bad)[1]) == ["priority"], bad
        # ... also when the body's priority would be ignored: bad input is never silent
        assert fields(DEFAULT_TRUST.resolve(None, None, bad)[1]) == ["priority"], bad


def test_tenant_tiers_decide_priority() -> None:
    trust = TrustConfig(tenant_priority={"online": 0, "offline": 1}, priority_from_body=True)
    assert trust.resolve("offline", None, -5)[0].priority == 1
    assert trust.resolve("other", None, -5)[0].priority == -5
    assert trust.bound({"tenant": "offline"}, -(2**63)).priority == 1
    with pytest.raises(ValidationError, match="outside priority_range"):
        TrustConfig(tenant_priority={"x": 5000})


def test_slos_validated_always_clamped_when_allowed_with_tenant_defaults() -> None:
    for bad in (math.nan, math.inf, -1, 0, "fast", True, 10**400):
        _, problems = DEFAULT_TRUST.resolve(None, {"slo_ttft_ms": bad}, None)
        assert fields(problems) == ["body.slo_ttft_ms"], bad
    trust = TrustConfig(
        slo_from_body=True,
        slo_ttft_ms_range=(1000, 10_000),
        tenant_slo={"gold": TenantSlo(slo_ttft_ms=2000, slo_tpot_ms=50)},
    )
    meta, _ = trust.resolve(None, {"slo_ttft_ms": 300, "slo_tpot_ms": 20}, None)
    assert (meta.slo_ttft_ms, meta.slo_tpot_ms) == (1000, 20)
    meta, _ = trust.resolve("gold", {"slo_tpot_ms": 20}, None)
    assert (meta.slo_ttft_ms, meta.slo_tpot_ms) == (2000, 20)
    meta, _ = DEFAULT_TRUST.resolve(None, {"slo_ttft_ms": 300}, None)
    assert meta.slo_ttft_ms is None  # not allowed from the body


def test_a_body_fields_value_that_is_not_an_object_is_a_problem() -> None:
    assert fields(DEFAULT_TRUST.resolve(None, "tenant=x", None, body_name="vllm_xargs")[1]) == [
        "vllm_xargs"
    ]


def test_config_refuses_empty_ranges_and_bad_names() -> None:
    with pytest.raises(ValidationError, match="priority_range"):
        TrustConfig(priority_range=(5, 1))
    with pytest.raises(ValidationError, match="slo_ttft_ms_range"):
        TrustConfig(slo_ttft_ms_range=(0, 10))
    with pytest.raises(ValidationError, match="characters"):
        TrustConfig(tenants=["x" * 100])
    assert TrustConfig(tenant_header="X-Team").tenant_header == "x-team"


def test_trust_is_a_section_of_the_schedkit_config() -> None:
    config = load_config({"policy": "vtc", "trust": {"tenant_from_body": True}})
    assert config.trust.tenant_from_body
    assert load_config("vtc").trust == DEFAULT_TRUST
    with pytest.raises(PolicyConfigError, match=r"trust\.tenant_form_body"):
        load_config({"policy": "vtc", "trust": {"tenant_form_body": True}})


# -- hostile values: nothing raises, nothing escapes the bounds -------------------------

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=200),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
TRUSTS = [
    DEFAULT_TRUST,
    OPEN,
    TrustConfig(
        tenant_from_body=True,
        tenants=["a", "b"],
        priority_from_body=True,
        priority_range=(0, 5),
        tenant_priority={"a": 1},
        slo_from_body=True,
        slo_ttft_ms_range=(100, 1000),
        max_tenant_len=8,
    ),
]


def check_bounds(trust: TrustConfig, meta: Any) -> None:
    assert isinstance(meta.tenant, str) and 0 < len(meta.tenant) <= trust.max_tenant_len
    assert (
        trust.tenants is None or meta.tenant in trust.tenants or meta.tenant == trust.default_tenant
    )
    lo, hi = trust.priority_range
    assert (isinstance(meta.priority, int) and lo <= meta.priority <= hi) or meta.priority == 0
    for value, (low, high) in (
        (meta.slo_ttft_ms, trust.slo_ttft_ms_range),
        (meta.slo_tpot_ms, trust.slo_tpot_ms_range),
    ):
        assert value is None or (math.isfinite(value) and low <= value <= high)


@settings(max_examples=300, deadline=None)
@given(
    which=st.sampled_from(range(len(TRUSTS))),
    header=st.one_of(st.none(), st.text(max_size=100)),
    tenant=hostile,
    priority=hostile,
    ttft=hostile,
    tpot=hostile,
)
def test_hostile_values_never_raise_nor_escape_the_bounds(
    which: int, header: str | None, tenant: Any, priority: Any, ttft: Any, tpot: Any
) -> None:
    trust = TRUSTS[which]
    body = {"tenant": tenant, "slo_ttft_ms": ttft, "slo_tpot_ms": tpot}
    meta, problems = trust.resolve(header, body, priority)
    if not problems:
        check_bounds(trust, meta)
    for problem in problems:
        assert problem.field and problem.message
    bounded = trust.bound(body, priority)
    check_bounds(trust, bounded)
    assert trust.tenant_priority.get(bounded.tenant, bounded.priority) == trust.bound_priority(
        priority, bounded.tenant
    )


# -- the edge -----------------------------------------------------------------------


def _rewrite(
    trust: TrustConfig, header: str | None, body: dict[str, Any], path: str, seal: Any = None
) -> Any:
    return rewrite_fields(trust, header, body, "xargs", body, "xargs", seal)


def call(
    trust: TrustConfig, body: bytes, headers: list[tuple[bytes, bytes]], method: str = "POST"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the middleware over a recording app: (what the app saw, messages sent)."""
    seen: dict[str, Any] = {}
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen["body"] = message["body"]
        seen["headers"] = dict(scope["headers"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/v1/completions", "headers": headers}
    asyncio.run(TrustMiddleware(app, trust, _rewrite)(scope, receive, send))
    return seen, sent


def test_edge_rewrites_the_body_and_its_length() -> None:
    body = json.dumps({"prompt": "hi", "priority": -(2**63), "xargs": {"tenant": "v", "k": 1}})
    seen, sent = call(DEFAULT_TRUST, body.encode(), [(b"X-Tenant-Id", b"acme")])
    assert sent == []
    rewritten = json.loads(seen["body"])
    assert rewritten == {"prompt": "hi", "xargs": {"k": 1, "tenant": "acme"}}
    assert seen["headers"][b"content-length"] == str(len(seen["body"])).encode()


def test_edge_answers_400_naming_the_field() -> None:
    _, sent = call(OPEN, b'{"xargs": {"slo_ttft_ms": "NaN"}}', [])
    assert sent[0]["status"] == 400
    error = json.loads(sent[1]["body"])["error"]
    assert error["param"] == "xargs.slo_ttft_ms" and "slo_ttft_ms" in error["message"]
    assert error["code"] == 400 and error["type"] == "BadRequestError"
    _, sent = call(OPEN, b'{"xargs": {"slo_ttft_ms": NaN}}', [])  # not JSON at all
    error = json.loads(sent[1]["body"])["error"]
    assert (sent[0]["status"], error["param"]) == (400, "body") and "NaN" in error["message"]


@pytest.mark.parametrize(
    ("method", "body", "forwarded"),
    [
        ("GET", b'{"xargs": {"tenant": "v"}}', b'{"xargs": {"tenant": "v"}}'),
        ("POST", b"[1, 2]", b"[1,2]"),
        ("POST", b"", b""),
    ],
)
def test_edge_passes_other_requests(method: str, body: bytes, forwarded: bytes) -> None:
    seen, sent = call(DEFAULT_TRUST, body, [], method=method)
    assert seen["body"] == forwarded and sent == []


# -- the simulator's replay ---------------------------------------------------------


def trace(n: int, seed: int = 0) -> tuple[list[TraceRequest], dict[str, str]]:
    rng = random.Random(seed)
    out, client, t = [], {}, 0.0
    for i in range(n):
        prompt, output = rng.randint(256, 768), rng.randint(64, 192)
        for name, tenant in (("honest", "honest"), ("attacker", f"anon-{i}")):
            t += rng.expovariate(400.0)
            out.append(
                TraceRequest(f"{name}-{i}", t, prompt, output, tenant=tenant, priority=i % 3)
            )
            client[f"{name}-{i}"] = name
    return out, client


def test_trusted_trace_metadata_is_unchanged_by_default() -> None:
    requests, _ = trace(20)
    assert all(
        a is b for a, b in zip(trusted_requests(requests, DEFAULT_TRUST), requests, strict=True)
    )


def test_trace_as_body_claims_follows_the_switches() -> None:
    requests, _ = trace(5)
    replayed = trusted_requests(requests, TrustConfig(trace="body"))
    assert {r.tenant for r in replayed} == {"default"} and {r.priority for r in replayed} == {0}
    replayed = trusted_requests(requests, TrustConfig(trace="body", tenant_from_body=True))
    assert [r.tenant for r in replayed] == [r.tenant for r in requests]


def attacker_share(requests: list[TraceRequest], client: dict[str, str]) -> float:
    cost = RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
    run = SimEngine(
        requests, cost, SimConfig(num_blocks=4096, max_num_seqs=32), PolicyFacade.from_config("vtc")
    ).run()
    done = sorted((r for r in run.records if r.finish_s is not None), key=lambda r: r.finish_s or 0)
    first = done[: len(done) // 2]
    return sum(client[r.request_id] == "attacker" for r in first) / len(first)


def test_fresh_tenant_ids_no_longer_win_under_vtc() -> None:
    """The issue's attack: a client claiming a fresh tenant per request took most of the
    completions under vtc; with the default trust config it gets its fair half."""
    requests, client = trace(150)
    believed = attacker_share(list(trusted_requests(requests, DEFAULT_TRUST)), client)
    assert believed > 0.8
    as_body = attacker_share(list(trusted_requests(requests, TrustConfig(trace="body"))), client)
    assert as_body <= 0.5 + 0.02
    header = [
        TraceRequest(
            r.request_id,
            r.arrival_s,
            r.prompt_tokens,
            r.output_tokens,
            tenant=DEFAULT_TRUST.resolve(client[r.request_id], {"tenant": r.tenant}, None)[
                0
            ].tenant,
        )
        for r in requests
    ]
    assert attacker_share(header, client) <= 0.5 + 0.02
