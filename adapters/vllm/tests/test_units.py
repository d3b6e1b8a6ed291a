"""Pieces that need no scheduler: version check, config lookup, request views."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import make_request
from schedkit.errors import PolicyConfigError

from schedkit_vllm.compat import UnsupportedVllmError, check_version, parse_version
from schedkit_vllm.config import resolve_config
from schedkit_vllm.views import VllmRequestView, hash_int


def test_importing_the_package_does_not_import_vllm() -> None:
    import subprocess

    code = "import sys, schedkit_vllm; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "version", ["0.32.0", "0.32.5", "0.33.0", "0.33.1.dev4+gabc", "v0.33", "0.34.0"]
)
def test_supported_versions(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["0.31.9", "0.35.0", "1.0.0", "dev", ""])
def test_unsupported_versions_name_the_fix(version: str) -> None:
    with pytest.raises(UnsupportedVllmError, match=r"supports vLLM >=0\.32,<0\.35"):
        check_version(version, environ={})


def test_parse_version() -> None:
    assert parse_version("0.33.1rc2") == (0, 33, 1)
    assert parse_version("0.33") == (0, 33, 0)


def test_config_sources(tmp_path: Path) -> None:
    assert resolve_config({}, environ={}) is None
    assert resolve_config({"other": 1}, environ={}) is None
    assert resolve_config({"schedkit": {"policy": "a+b"}}, environ={}).policy == ["a", "b"]  # type: ignore[union-attr]
    assert resolve_config({"schedkit": "priority"}, environ={}).policy == ["priority"]  # type: ignore[union-attr]
    path = tmp_path / "c.json"
    path.write_text('{"policy": ["priority"]}')
    assert resolve_config({}, environ={"SCHEDKIT_CONFIG": str(path)}).policy == ["priority"]  # type: ignore[union-attr]
    with pytest.raises(PolicyConfigError, match="must be an object"):
        resolve_config({"schedkit": 3}, environ={})
    with pytest.raises(PolicyConfigError, match=r"unknown_key"):
        resolve_config({"schedkit": {"policy": ["fcfs"], "unknown_key": 1}}, environ={})


def test_request_view_reads_vllm_xargs() -> None:
    request = make_request(
        "v",
        33,
        max_tokens=9,
        priority=2,
        arrival_time=105.0,
        tenant="acme",
        slo_ttft_ms=250,
        slo_tpot_ms="40",
    )
    view = VllmRequestView(request, epoch=100.0)
    assert (view.request_id, view.tenant, view.priority) == ("v", "acme", 2)
    assert view.arrival_time == pytest.approx(5.0)
    assert (view.num_prompt_tokens, view.max_tokens, view.num_computed_tokens) == (33, 9, 0)
    assert (view.slo_ttft_ms, view.slo_tpot_ms) == (250.0, 40.0)
    assert (view.num_output_tokens, view.num_preemptions, view.num_cached_tokens) == (0, 0, 0)
    plain = VllmRequestView(make_request("w", 5, slo_ttft_ms="soon"), epoch=0.0)
    assert (plain.tenant, plain.slo_ttft_ms, plain.slo_tpot_ms) == ("default", None, None)


@pytest.mark.parametrize(
    "field",
    ["tenant", "priority", "slo_ttft_ms", "slo_tpot_ms", "num_cached_tokens", "arrival_time"],
)
def test_a_policy_cannot_write_to_a_request_view(field: str) -> None:
    view = VllmRequestView(make_request("v", 33, tenant="acme"), epoch=0.0)
    with pytest.raises(AttributeError):
        setattr(view, field, 1)
    assert view.tenant == "acme"
    view.admitted(16)  # the runtime's record of the admission
    assert view.num_cached_tokens == 16


@pytest.mark.parametrize("field", ["block_hash", "depth", "last_access", "num_hits"])
def test_a_policy_cannot_write_to_a_block_view(field: str) -> None:
    from types import SimpleNamespace

    from schedkit_vllm.views import VllmBlockView

    block = SimpleNamespace(block_hash=None, block_hash_num_tokens=32, block_id=3)
    view = VllmBlockView(block, 16, last_access=1.0)
    with pytest.raises(AttributeError):
        setattr(view, field, 5)
    view.hit(2.0)
    assert (view.num_hits, view.last_access, view.depth) == (1, 2.0, 1)


def test_request_view_block_hashes_follow_vllms_list() -> None:
    request = make_request("h", 40, max_tokens=16)  # 2 full 16-token blocks
    view = VllmRequestView(request, epoch=0.0)
    first = view.block_hashes
    assert list(first) == [int.from_bytes(bytes(h)[:8], "big") for h in request.block_hashes]
    assert len(first) == 2 and first[0] != first[1]
    request.append_output_token_ids([7] * 8)  # 48 tokens: vLLM hashes a third block
    assert len(view.block_hashes) == 3 and list(view.block_hashes)[:2] == list(first)[:2]
    del request.block_hashes[1:]  # vLLM rewrites the list (a streaming session)
    request.block_hashes.append(bytes(32))
    assert list(view.block_hashes) == [hash_int(request.block_hashes[0]), 0]
    assert VllmRequestView(make_request("e", 15), epoch=0.0).block_hashes == []


def test_request_view_keeps_metadata_within_the_trust_bounds() -> None:
    """Defence in depth for requests that did not pass the HTTP edge (``LLM(...)``)."""
    from schedkit.trust import TrustConfig

    request = make_request(
        "t", 5, priority=-(2**63), tenant="x" * 5000, slo_ttft_ms=float("nan"), slo_tpot_ms=0.01
    )
    view = VllmRequestView(request, epoch=0.0)
    assert (view.tenant, view.priority) == ("x" * 64, -1000)
    assert (view.slo_ttft_ms, view.slo_tpot_ms) == (None, 1.0)
    trust = TrustConfig(tenants=["gold"], tenant_priority={"gold": -5}, priority_range=(-10, 10))
    gold = VllmRequestView(make_request("g", 5, priority=3, tenant="gold"), 0.0, trust)
    assert (gold.tenant, gold.priority) == ("gold", -5)
    other = VllmRequestView(make_request("o", 5, priority=99, tenant="acme"), 0.0, trust)
    assert (other.tenant, other.priority) == ("default", 10)


def test_unsealed_metadata_is_a_client_claim_with_an_edge_key() -> None:
    """Defence in depth (issue #35): with the server's edge key, metadata the edge did not
    seal (a body that stepped around it) grants nothing; sealed metadata is the
    operator's; without a key (offline ``LLM``) metadata is the operator's as before."""
    from schedkit.seal import Seal
    from schedkit.trust import DEFAULT_TRUST

    seal = Seal("an-edge-key-of-32-characters-000")
    claims = {"tenant": "premium", "slo_ttft_ms": 1}
    claimed = VllmRequestView(
        make_request("c", 5, priority=-1000, **claims), 0.0, DEFAULT_TRUST, seal
    )
    assert (claimed.tenant, claimed.priority, claimed.slo_ttft_ms) == ("default", 0, None)
    sealed = {**claims, "schedkit_seal": seal.sign(claims)}
    vouched = VllmRequestView(
        make_request("s", 5, priority=-1000, **sealed), 0.0, DEFAULT_TRUST, seal
    )
    assert (vouched.tenant, vouched.priority, vouched.slo_ttft_ms) == ("premium", -1000, 1.0)
    offline = VllmRequestView(make_request("o", 5, priority=-1000, **claims), 0.0, DEFAULT_TRUST)
    assert (offline.tenant, offline.priority) == ("premium", -1000)


def test_middleware_config_sources(tmp_path: Path) -> None:
    from schedkit.trust import DEFAULT_TRUST

    from schedkit_vllm.trust import trust_from_environ

    assert trust_from_environ({}, argv=[]) == DEFAULT_TRUST
    env = {"SCHEDKIT_TRUST": '{"tenant_from_body": true}'}
    assert trust_from_environ(env, argv=[]).tenant_from_body
    argv = ["x", "--additional-config", '{"schedkit": {"trust": {"max_tenant_len": 8}}}']
    assert trust_from_environ({}, argv=argv).max_tenant_len == 8
    path = tmp_path / "c.json"
    path.write_text('{"policy": ["vtc"], "trust": {"tenants": ["a"]}}')
    assert trust_from_environ({"SCHEDKIT_CONFIG": str(path)}, argv=[]).tenants == ["a"]
    with pytest.raises(PolicyConfigError, match="SCHEDKIT_TRUST"):
        trust_from_environ({"SCHEDKIT_TRUST": '{"nope": 1}'}, argv=[])


def test_stream_rejections_wrap_this_vllms_generators() -> None:
    """The generators ``schedkit_vllm.streaming`` wraps exist with a ``result_generator``
    in this vLLM (else streamed rejections would silently end with ``[DONE]`` only)."""
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

    from schedkit_vllm import streaming

    wrapped = [
        "OpenAIServingCompletion.completion_stream_generator",
        "OpenAIServingChat.chat_completion_stream_generator",
    ]
    assert streaming.install() == wrapped
    method = OpenAIServingCompletion.completion_stream_generator
    assert streaming.install() == wrapped  # once only
    assert OpenAIServingCompletion.completion_stream_generator is method


def test_rejection_chunk_has_vllms_fields() -> None:
    from schedkit_vllm.streaming import rejection_chunk

    head = {"id": "cmpl-1", "created": 5, "model": "m"}
    line = rejection_chunk(head, "text_completion", 2, "rejected: full")
    assert line.startswith("data: {") and line.endswith("}\n\n")
    choice = json.loads(line.removeprefix("data: "))["choices"][0]
    assert choice == {
        "index": 2,
        "logprobs": None,
        "text": "",
        "finish_reason": "abort",
        "stop_reason": "rejected: full",
    }
    chat = json.loads(rejection_chunk(head, "chat.completion.chunk", 0, "r").removeprefix("data: "))
    assert chat["object"] == "chat.completion.chunk" and chat["choices"][0]["delta"] == {}


def test_the_scheduler_class_loads_no_bench_simulator_or_numpy_of_ours() -> None:
    """Issue #36: what vLLM's engine-core process imports of schedkit is the kit, the core
    and the adapter's runtime, not the adapter's harness (timed in
    benchmarks/speed/README.md)."""
    from schedkit.testing.imports import HARNESS_PACKAGES, loaded_by

    loaded = loaded_by("vllm.v1.core.sched.scheduler", "schedkit_vllm:Scheduler")
    modules = loaded["modules"]
    assert isinstance(modules, list) and "schedkit_vllm.scheduler" in modules
    harness = [m for m in modules if m.startswith((*HARNESS_PACKAGES, "schedkit_vllm.harness"))]
    assert harness == [], harness
    assert not any(m == "numpy" or m.startswith("numpy.") for m in modules)
