"""The host-memory KV tier (vLLM's ``--kv-offloading-size``) in the simulated engine
(issue #39 item 5): written through as blocks are computed, a prefix found there is
loaded over the host link instead of recomputed, loads share the link, and the eviction
hooks decide what the tier drops."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _fixtures import (
    EvictNewestFirst,
    assert_drained,
    by_id,
    cost_models,
    engine,
    record_diffs,
    req,
    workloads,
)
from _fixtures import configs as sim_configs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedkit import Policy
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.sim.request import SimRequest
from schedkit.workload import TraceRequest

# 1 ms a step plus 0.1 ms a prefill token: a recompute costs what it computes
COST = LinearCostModel(c0=0.001, c_prefill=1e-4, c_decode=0.0, c_kv=0.0)
LOAD_S = 0.001  # a block on the host link
LATENCY_S = 0.002

# "a" computes prefix 1-4 (16 blocks); "b", another prefix, needs the GPU blocks and
# evicts 13 of a's (the prefix's last first); "c" comes back to prefix 1-4.
COMEBACK = [
    req("a", 0.0, 256, 2, hash_ids=(1, 2, 3, 4)),
    req("b", 0.5, 256, 2, hash_ids=(5, 6, 7, 8)),
    req("c", 1.0, 256, 2, hash_ids=(1, 2, 3, 4)),
]


def tier(host_blocks: int, **more: object) -> SimConfig:
    """20 GPU blocks, 4 per hash id, and ``host_blocks`` of host memory."""
    fields: dict[str, object] = {
        "num_blocks": 20,
        "hash_block_tokens": 64,
        "host_kv_blocks": host_blocks,
        "host_kv_block_load_s": LOAD_S,
        "host_kv_load_latency_s": LATENCY_S,
    }
    return SimConfig.model_validate({**fields, **more})


def run(
    requests: Sequence[TraceRequest],
    config: SimConfig,
    policies: Sequence[tuple[str, Policy]] = (),
    cost: StepCost = COST,
) -> tuple[RunResult, SimEngine]:
    """A run checked after every step, the same with and without decode stretches."""
    stepped = engine(requests, config, policies, cost=cost, stretch=False)
    result = stepped.run()
    stretched = engine(requests, config, policies, cost=cost, stretch=True).run()
    assert not record_diffs(result.records, stretched.records, rel=1e-9)
    return result, stepped


def test_a_prefix_evicted_from_the_gpu_is_loaded_from_host_memory() -> None:
    without, _ = run(COMEBACK, tier(0))
    c = by_id(without)["c"]
    assert c.cached_tokens == 3 * 16  # b left 3 of a's blocks on the GPU: 208 recomputed
    assert c.first_token_s == pytest.approx(1.0 + 0.001 + 208 * 1e-4)
    result, eng = run(COMEBACK, tier(100))
    c = by_id(result)["c"]
    # the host tier holds all 16 of a's blocks; the last prompt token is always computed
    assert c.cached_tokens == 15 * 16
    assert result.host_hit_tokens == 12 * 16
    landed = 1.0 + 12 * LOAD_S + LATENCY_S
    assert c.scheduled_s == 1.0  # its queue time ends when its load starts
    assert c.first_token_s == pytest.approx(landed + 0.001 + 16 * 1e-4)
    assert result.prefix_hit_tokens == 15 * 16  # both tiers' hits
    assert_drained(eng)


def test_no_tier_changes_nothing() -> None:
    plain, _ = run(COMEBACK, SimConfig(num_blocks=20, hash_block_tokens=64))
    zero, _ = run(COMEBACK, tier(0))
    assert not record_diffs(plain.records, zero.records)
    assert zero.host_hit_tokens == 0


def test_loads_share_the_link_one_after_another() -> None:
    # two 8-block prefixes are evicted from the GPU by b, then come back at once: the
    # second load starts when the first has used the link
    requests = [
        req("a1", 0.0, 128, 2, hash_ids=(1, 2)),
        req("a2", 0.1, 128, 2, hash_ids=(3, 4)),
        req("b", 0.5, 256, 2, hash_ids=(5, 6, 7, 8)),
        req("d1", 1.0, 128, 2, hash_ids=(1, 2)),
        req("d2", 1.0, 128, 2, hash_ids=(3, 4)),
    ]
    eng = engine(requests, tier(100, reserve_full_prompt=False), cost=COST)
    loads: list[tuple[str, float, int, float]] = []
    start_load = eng._start_load

    def recorded(req: SimRequest, hit: int, own: int, extra: int) -> None:
        start_load(req, hit, own, extra)
        loads.append((req.record.request_id, eng.clock, extra, eng.loading[-1][0]))

    eng._start_load = recorded  # type: ignore[method-assign]
    result = eng.run()
    assert [(rid, clock) for rid, clock, _, _ in loads] == [("d1", 1.0), ("d2", 1.0)]
    (_, _, first_blocks, first_lands), (_, _, second_blocks, second_lands) = loads
    assert first_lands == pytest.approx(1.0 + first_blocks * LOAD_S + LATENCY_S)
    assert second_lands == pytest.approx(first_lands + second_blocks * LOAD_S)
    records = by_id(result)
    assert records["d1"].cached_tokens == records["d2"].cached_tokens == 7 * 16
    assert (records["d2"].first_token_s or 0.0) > second_lands


def test_a_small_tier_drops_the_least_recently_used_first() -> None:
    # 16 blocks of host memory: b's prefix pushes a's out, so c recomputes
    result, _ = run(COMEBACK, tier(16))
    assert by_id(result)["c"].cached_tokens == 3 * 16
    assert result.host_hit_tokens == 0


def test_the_eviction_hooks_decide_what_the_tier_drops() -> None:
    # newest first: the tier keeps a's prefix and drops b's as it arrives, so c loads it
    newest = EvictNewestFirst()
    result, eng = run(COMEBACK, tier(16), [("mru", newest)])
    assert by_id(result)["c"].cached_tokens == 15 * 16
    assert newest.calls, "the policy was never asked"
    assert eng.host is not None and eng.host.evictions > 0


def test_a_preempted_request_reloads_what_it_had_computed() -> None:
    # two long decodes in 20 blocks: the newer is preempted; with the tier its prompt and
    # output come back from host memory instead of being recomputed
    requests = [req("x", 0.0, 120, 100), req("y", 0.0, 120, 100)]
    without, _ = run(requests, tier(0, hash_block_tokens=0))
    with_tier, _ = run(requests, tier(100, hash_block_tokens=0))
    assert without.preemptions > 0 and with_tier.preemptions > 0
    assert with_tier.recomputed_tokens < without.recomputed_tokens
    assert with_tier.host_hit_tokens > 0


@pytest.mark.parametrize(
    ("update", "words"),
    [
        ({"enable_prefix_caching": False}, "needs prefix caching"),
        ({"mixed_prefill": False}, "needs prefix caching and vLLM's batches"),
    ],
)
def test_a_tier_needs_vllm_prefix_caching_and_batches(
    update: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        SimConfig(num_blocks=10, host_kv_blocks=10, **update)  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=workloads(),
    config=sim_configs(),
    host=st.integers(1, 200),
    load_s=st.sampled_from([0.0, 1e-4, 0.01]),
    cost=cost_models,
    mru=st.booleans(),
)
def test_a_tier_loses_no_request_and_conserves_kv_blocks(
    requests: list[TraceRequest],
    config: SimConfig,
    host: int,
    load_s: float,
    cost: StepCost,
    mru: bool,
) -> None:
    config = config.model_copy(
        update={
            "host_kv_blocks": host,
            "host_kv_block_load_s": load_s,
            "host_kv_load_latency_s": load_s,
            "enable_prefix_caching": True,
            "mixed_prefill": True,
        }
    )
    policies: list[tuple[str, Policy]] = [("mru", EvictNewestFirst())] if mru else []
    result, eng = run(requests, config, policies, cost)
    assert_drained(eng)  # and the blocks were checked after every step
    assert not eng.loading
    assert eng.host is not None and eng.host.used <= host
    finished: list[RequestRecord] = [r for r in result.records if not r.rejected]
    assert all(r.output_tokens == r.max_tokens for r in finished)


def test_a_cluster_counts_every_replicas_host_hits() -> None:
    from schedkit.bench.engines.sim import simulate
    from schedkit.config import SchedkitConfig

    # round-robin: each replica gets a, b and c of its own copy of COMEBACK
    requests = [
        req(
            f"{r.request_id}{copy}",
            r.arrival_s,
            r.prompt_tokens,
            r.output_tokens,
            hash_ids=r.hash_ids,
        )
        for r in COMEBACK
        for copy in (1, 2)
    ]
    config = SchedkitConfig.model_validate({"policy": ["fcfs"]})
    one, _ = run(COMEBACK, tier(100))
    both = simulate(requests, COST, tier(100), config, replicas=2)
    assert one.host_hit_tokens > 0
    assert both.host_hit_tokens == 2 * one.host_hit_tokens
