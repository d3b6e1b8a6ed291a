"""The router's parts without a Ray cluster: the prefix index, the views, the policy's
fallback reasons, the router's config."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from conftest import SITE
from schedkit.edge.remote import request_view
from schedkit.errors import SchedkitError

from schedkit_ray.policy import RouteFacade, router_config
from schedkit_ray.prefix import PrefixIndex, block_hashes, prompt_token_ids
from schedkit_ray.views import PromptBlocks, RayReplica, numeric_gauges

if SITE not in sys.path:
    sys.path.insert(0, SITE)  # the test policies, by entry point


def test_block_hashes_chain_over_the_prefix() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes([*range(16), 99, *range(17, 40)], 16)
    assert len(a) == 2  # the partial third block has no hash
    assert a[0] == b[0] and a[1] != b[1]  # one token in block 2 changes it
    assert block_hashes([*range(16, 32), *range(16)], 16)[1] != a[0]  # chained, not per block


def test_prompt_tokens_from_ids_text_and_chat() -> None:
    assert prompt_token_ids({"prompt": [5, 6, 7]}) == [5, 6, 7]
    assert prompt_token_ids({"prompt": [[1, 2], [3]]}) == [1, 2]
    assert len(prompt_token_ids({"prompt": "a b  c"})) == 3
    chat = {"messages": [{"role": "user", "content": "x y"}, {"content": [{"text": "z"}]}]}
    assert len(prompt_token_ids(chat)) == 3


def test_prefix_index_is_bounded_lru_and_forgets_the_dead() -> None:
    index = PrefixIndex(blocks_per_replica=3)
    index.add("r1", [1, 2, 3])
    index.add("r1", [1, 9])  # 1 used again: 2 is now the oldest
    assert index.size("r1") == 3
    assert index.matched_blocks("r1", [1, 2]) == 1  # 2 was evicted
    assert index.matched_blocks("r1", [3, 1]) == 2
    assert index.matched_blocks("r2", [1]) == 0
    index.add("r1", [5, 6], bound=1)
    assert index.size("r1") == 1
    index.drop("r1")
    assert index.size("r1") == 0 and index.replicas() == []


def _replica(index: PrefixIndex, body: dict[str, object], gauges: dict[str, float]) -> RayReplica:
    return RayReplica(0, "r", gauges, 2, 0.0, index, PromptBlocks(prompt_token_ids(body)))


def test_replica_view_reads_gauges_in_flight_and_the_index() -> None:
    body = {"prompt": list(range(40))}
    index = PrefixIndex(100)
    gauges = {"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 1.0,
              "vllm:kv_cache_usage_perc": 0.25, "vllm:num_gpu_blocks": 100.0,
              "vllm:block_size": 16.0}  # fmt: skip
    view = _replica(index, body, gauges)
    request = request_view(body, None, "r1", 0.0)
    assert view.cached_tokens(request) == 0
    index.add("r", block_hashes(list(range(40)), 16))
    assert view.cached_tokens(request) == 32  # two full blocks
    assert (view.engine.num_running, view.engine.num_waiting) == (3, 1)
    assert view.engine.kv_blocks_free == 75 and view.engine.block_size == 16
    short = request_view({"prompt": list(range(32))}, None, "r2", 0.0)
    shorter = _replica(index, {"prompt": list(range(32))}, gauges)
    assert shorter.cached_tokens(short) == 31  # never the whole prompt
    busy = RayReplica(0, "r", {}, 7, 0.0, index, PromptBlocks([]))
    assert busy.engine.num_running + busy.engine.num_waiting == 7  # the router's count
    assert numeric_gauges({"a": 1, "b": "x", "c": True}) == {"a": 1.0}


@pytest.mark.parametrize(
    ("tenant", "answer"),
    [("last", (2, "policy")), ("raise", (None, "raised")), ("invalid", (None, "invalid")),
     ("anyone", (None, "none")), ("slow", (None, "timeout"))],
)  # fmt: skip
def test_decide_says_why_there_is_no_answer(tenant: str, answer: tuple[object, str]) -> None:
    config = router_config("test-by-tenant", None)
    assert config is not None
    facade = RouteFacade.for_router(config, budget_ms=50.0)
    body = {"prompt": "hi"}
    replicas = [_replica(PrefixIndex(10), body, {}) for _ in range(3)]
    assert facade.decide(request_view(body, tenant, "r", 0.0), replicas) == answer


def test_router_config_reads_policy_and_options() -> None:
    assert router_config(None, None) is None
    config = router_config("prefix-affinity", '{"prefix-affinity": {"queue_weight": 1}}')
    assert config is not None and config.options["prefix-affinity"]["queue_weight"] == 1
    again = router_config(config.model_dump(mode="json"), {"prefix-affinity": {"kv_weight": 2}})
    assert again is not None and again.options["prefix-affinity"]["kv_weight"] == 2
    with pytest.raises(SchedkitError, match="not valid JSON"):
        router_config("prefix-affinity", "{nope")
    with pytest.raises(SchedkitError, match="without a policy"):
        router_config(None, "{}")


def test_the_body_is_read_as_the_ingress_and_ray_serve_llm_pass_it() -> None:
    """``body=`` from schedkit_ray's ingress; the first positional argument from Ray Serve
    LLM (a dict, or a pydantic request read with ``model_dump``); else nothing."""
    from types import SimpleNamespace

    from pydantic import BaseModel

    from schedkit_ray.router import request_body

    class CompletionRequest(BaseModel):
        model: str = "m"
        prompt: list[int]
        max_tokens: int | None = None

    def pending(*args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(args=list(args), kwargs=kwargs)

    assert request_body(pending(body={"prompt": [1, 2]}, tenant="t")) == {"prompt": [1, 2]}
    assert request_body(pending({"prompt": [3]})) == {"prompt": [3]}
    assert request_body(pending(CompletionRequest(prompt=[4, 5]))) == {"prompt": [4, 5]}
    assert request_body(pending("text")) == {}
    assert request_body(pending()) == {}


def test_a_pool_routers_replicas_have_its_role() -> None:
    """A router given ``role`` shows its replicas in that role, as the simulator shows a
    disaggregated pool; an unknown role is refused."""
    from types import SimpleNamespace

    from schedkit_ray.router import SchedkitRouter

    router = SchedkitRouter.__new__(SchedkitRouter)
    router.initialize_state(policy="round-robin", role="decode")
    replica = SimpleNamespace(replica_id=SimpleNamespace(unique_id="r1"), routing_stats={})
    assert router._view(0, replica, PromptBlocks([])).role == "decode"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role 'middle'"):
        router.initialize_state(role="middle")
