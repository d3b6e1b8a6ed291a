"""Eviction policies in the simulated engine: a reused prefix survives a flood of one-offs."""

from __future__ import annotations

import pytest
from schedkit import EngineView, Policy, PolicyFacade, hookimpl
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.workload import TraceRequest

from schedkit_evict import QueuedPrefixAware

COST = LinearCostModel(c0=0.005, c_prefill=1e-5, c_decode=0.0, c_kv=0.0)
PREFIX = (1, 2, 3, 4)  # four 16-token blocks every "shared" request starts with


def prompt(rid: str, at: float, hash_ids: tuple[int, ...]) -> TraceRequest:
    # 8 tokens past the hashed blocks, so every hashed block can be a hit.
    return TraceRequest(rid, at, 16 * len(hash_ids) + 8, 1, hash_ids=hash_ids)


def scenario() -> list[TraceRequest]:
    """The prefix is used twice, then 16 one-off prompts flood the cache, then reused."""
    requests = [prompt("first", 0.0, PREFIX), prompt("second", 1.0, PREFIX)]
    for i in range(16):
        unique = tuple(range(100 + 4 * i, 104 + 4 * i))
        requests.append(prompt(f"one-off-{i:02d}", 2.0 + i, unique))
    requests.append(prompt("again", 30.0, PREFIX))
    return requests


def replay(policy: str) -> tuple[RunResult, PolicyFacade]:
    facade = PolicyFacade.from_config(policy, strict=True)
    config = SimConfig(num_blocks=40, max_num_seqs=4, hash_block_tokens=16)
    engine = SimEngine(scenario(), COST, config, facade, check_invariants=True)
    return engine.run(), facade


def cached_tokens(run: RunResult, request_id: str) -> int:
    return next(r.cached_tokens for r in run.records if r.request_id == request_id)


def test_lru_loses_the_prefix_to_the_flood() -> None:
    run, _ = replay("fcfs")
    assert cached_tokens(run, "second") == 64
    assert cached_tokens(run, "again") == 0


@pytest.mark.parametrize("policy", ["lfu", "slru", "prefix-aware", "prefix-aware-queued"])
def test_reused_prefix_survives_the_flood(policy: str) -> None:
    run, facade = replay(policy)
    assert cached_tokens(run, "second") == 64
    assert cached_tokens(run, "again") == 64
    assert run.prefix_hit_tokens > replay("fcfs")[0].prefix_hit_tokens
    assert facade.error_count == 0
    assert all(r.finish_reason == "length" for r in run.records)


def queued_scenario() -> list[TraceRequest]:
    """A prefix used once, then three one-off prompts and, queued behind them, a request
    for the prefix: each one-off needs blocks the cache only has by evicting."""
    requests = [prompt("first", 0.0, PREFIX)]
    for i in range(3):
        requests.append(prompt(f"one-off-{i}", 1.0, tuple(range(100 + 4 * i, 104 + 4 * i))))
    requests.append(prompt("queued", 1.0, PREFIX))
    return requests


def replay_queued(policy: str) -> RunResult:
    facade = PolicyFacade.from_config(policy, strict=True)
    # One request at a time: `queued` waits while the one-offs run and evict.
    config = SimConfig(num_blocks=12, max_num_seqs=1, hash_block_tokens=16)
    engine = SimEngine(queued_scenario(), COST, config, facade, check_invariants=True)
    return engine.run()


@pytest.mark.parametrize("policy", ["fcfs", "lfu", "slru", "prefix-aware"])
def test_without_the_queue_a_prefix_used_once_is_evicted(policy: str) -> None:
    assert cached_tokens(replay_queued(policy), "queued") < 64


def test_prefix_aware_queued_keeps_the_blocks_a_queued_request_will_hit() -> None:
    run = replay_queued("prefix-aware-queued")
    assert cached_tokens(run, "queued") == 64
    assert all(cached_tokens(run, f"one-off-{i}") == 0 for i in range(3))


def test_prefix_aware_queued_keeps_state_only_for_requests_in_the_engine() -> None:
    # 400 requests, each with its own tenant and private blocks after the shared prefix.
    requests = [
        TraceRequest(
            f"r{i}", 0.01 * i, 16 * 6 + 8, 2, tenant=f"t{i}", hash_ids=(*PREFIX, 1000 + i, 2000 + i)
        )
        for i in range(400)
    ]
    facade = PolicyFacade.from_config("prefix-aware-queued", strict=True)
    policy = facade.policies[0][1]
    assert isinstance(policy, QueuedPrefixAware)
    queued: QueuedPrefixAware = policy  # the narrowed type, for the Probe's method below
    peak = [0]

    class Probe(Policy):
        @hookimpl
        def on_step_finished(self, engine: EngineView) -> None:
            assert len(queued._hashes) <= engine.num_running + engine.num_waiting
            peak[0] = max(peak[0], len(queued._reuse))

    facade = PolicyFacade([("prefix-aware-queued", policy), ("probe", Probe())], strict=True)
    config = SimConfig(num_blocks=64, max_num_seqs=4, hash_block_tokens=16)
    run = SimEngine(requests, COST, config, facade, check_invariants=True).run()
    assert all(r.finish_reason == "length" for r in run.records)
    assert peak[0] > 0  # it did track queued requests
    assert not policy._hashes and not policy._reuse
