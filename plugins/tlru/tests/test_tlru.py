"""tlru: the tail budget, its high-water history, bounded state, the engine contract; then
in the simulated engine, a long conversation's head survives a flood of short one-offs
that LRU lets it lose."""

from __future__ import annotations

from schedkit import BlockState, EngineState, PolicyFacade, PolicyRegistry, RequestState
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_tlru import TailOptimizedLRU

NAME = "tlru"
ENGINE = EngineState(kv_blocks_total=1000, block_size=16)


def conversation(rid: str, blocks: int, *, output: int = 0, first: int = 0) -> RequestState:
    state = RequestState(rid, 16 * blocks, 8, block_hashes=list(range(first, first + blocks)))
    state.num_output_tokens = output
    return state


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-tlru"
    assert entry.load() is TailOptimizedLRU


def test_blocks_past_the_tail_budget_go_first() -> None:
    """L = 10 blocks, next message 2 blocks, xi 4 blocks: keep B = 8, the last 2 are safe."""
    policy = TailOptimizedLRU(xi_tokens=64, next_prompt_tokens=32)
    policy.on_request_arrived(conversation("c", 10), ENGINE)
    assert policy.budget(0, 16) == 8
    keys = [policy.eviction_key(BlockState(h, h, float(10 - h)), ENGINE) for h in range(10)]
    assert [k[0] for k in keys] == [1] * 8 + [0] * 2
    assert sorted(range(10), key=lambda h: keys[h]) == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    untracked = policy.eviction_key(BlockState(99, 50, 0.0), ENGINE)
    assert untracked == (1, 0.0)  # kept as LRU would


def test_the_history_is_a_high_water_mark_and_counts_output() -> None:
    policy = TailOptimizedLRU(xi_tokens=64, next_prompt_tokens=32)
    long = conversation("long", 10)
    policy.on_request_arrived(long, ENGINE)
    policy.on_request_arrived(conversation("short", 3), ENGINE)  # the same first 3 blocks
    assert policy.budget(0, 16) == 8  # not lowered by the shorter request
    long.num_output_tokens = 64  # 4 more blocks of history when it finishes
    policy.on_request_finished(long, ENGINE)
    assert policy.budget(0, 16) == 12


def test_a_short_conversation_is_all_safe() -> None:
    policy = TailOptimizedLRU(xi_tokens=1024, next_prompt_tokens=200)
    policy.on_request_arrived(conversation("c", 20), ENGINE)
    assert policy.budget(0, 16) == 0


def test_the_history_is_bounded() -> None:
    policy = TailOptimizedLRU(max_tracked_blocks=50)
    for i in range(20):
        policy.on_request_arrived(conversation(f"c{i}", 10, first=100 * i), ENGINE)
    assert len(policy.history) == 50
    assert 1900 in policy.history and 0 not in policy.history  # the oldest dropped


test_conformance = conformance_test(NAME, max_examples=100)
test_contract = contract_test(NAME)  # on every engine installed here


# -- in the simulated engine ---------------------------------------------------------

COST = LinearCostModel(c0=0.005, c_prefill=1e-5, c_decode=0.0, c_kv=0.0)


def scenario() -> list[TraceRequest]:
    """A 128-block conversation, a flood of 8-block one-offs, then its next turn."""
    head = tuple(range(128))
    requests = [TraceRequest("turn-1", 0.0, 16 * 128 + 8, 1, hash_ids=head)]
    for i in range(30):  # 240 blocks: more than the cache holds
        unique = tuple(range(1000 + 8 * i, 1008 + 8 * i))
        requests.append(TraceRequest(f"one-off-{i:02d}", 1.0 + i, 16 * 8 + 8, 1, hash_ids=unique))
    requests.append(
        TraceRequest("turn-2", 60.0, 16 * 140 + 8, 1, hash_ids=(*head, *range(5000, 5012)))
    )
    return requests


def replay(policy: str, options: dict[str, dict[str, int]] | None = None) -> RunResult:
    config = {"policy": policy, "options": options or {}}
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=200, max_num_seqs=4, hash_block_tokens=16)
    run = SimEngine(scenario(), COST, sim, facade, check_invariants=True).run()
    assert facade.error_count == 0
    return run


def cached(run: RunResult, request_id: str) -> int:
    return next(r.cached_tokens for r in run.records if r.request_id == request_id)


def test_the_conversation_head_survives_a_flood_of_one_offs() -> None:
    """xi = 64 blocks: the one-offs (8 blocks) are all safe, the conversation keeps its
    first 128 + 13 - 64 = 77 blocks; LRU evicts the conversation, the oldest."""
    lru = replay("fcfs")
    tlru = replay(NAME, {NAME: {"xi_tokens": 1024, "next_prompt_tokens": 200}})
    assert cached(lru, "turn-2") == 0
    assert cached(tlru, "turn-2") == 16 * 77
    assert all(r.finish_reason == "length" for r in tlru.records)
