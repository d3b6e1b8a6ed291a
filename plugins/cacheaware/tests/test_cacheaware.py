"""cache-aware: the rule on hand-made queues (threshold, window, who keeps its place),
the engine contract, and in the simulated engine: a cached prompt admitted before its
prefix is evicted, and the policy against vLLM's engine setting it restates."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from schedkit import EngineState, PolicyFacade, PolicyRegistry, RequestState, RequestView
from schedkit.config import SchedkitConfig
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test
from schedkit.testing.contract import SCENARIOS
from schedkit.testing.contract_run import assert_contract, installed_engines
from schedkit.workload import TraceRequest

from schedkit_cacheaware import CacheAwareAdmission

NAME = "cache-aware"
COST = LinearCostModel(c0=0.005, c_prefill=1e-5, c_decode=0.0, c_kv=0.0)


def ids(requests: Sequence[RequestView] | None) -> list[str]:
    assert requests is not None
    return [r.request_id for r in requests]


def queue(*names: str) -> list[RequestState]:
    return [RequestState(n, 64, 8, arrival_time=i) for i, n in enumerate(names)]


def engine(used: float, cached: dict[str, int]) -> EngineState:
    state = EngineState(kv_blocks_total=100, block_size=16)
    state.kv_blocks_free = round(100 * (1 - used))
    state.cached = cached
    return state


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-cacheaware"
    assert entry.load() is CacheAwareAdmission


def test_deepest_hit_first_and_arrival_between_equals() -> None:
    policy = CacheAwareAdmission()
    hits = {"b": 32, "c": 48, "d": 32}
    assert ids(policy.order_waiting(queue("a", "b", "c", "d"), engine(0.6, hits))) == [
        "c", "b", "d", "a",
    ]  # fmt: skip


def test_below_the_threshold_or_nothing_to_gain_the_order_stands() -> None:
    policy = CacheAwareAdmission()
    waiting = queue("a", "b")
    assert policy.order_waiting(waiting, engine(0.4, {"b": 32})) is None  # 40% used < 50%
    assert policy.order_waiting(waiting, engine(0.6, {"a": 32})) is None  # already in order
    low = CacheAwareAdmission(CacheAwareAdmission.Options(threshold=0.0))
    assert ids(low.order_waiting(waiting, engine(0.0, {"b": 32}))) == ["b", "a"]


def test_started_requests_keep_their_place_and_nothing_moves_past_them() -> None:
    """A preempted request, or one with tokens computed, holds its slot: vLLM's rule."""
    policy = CacheAwareAdmission()
    a, p, b, c = queue("a", "p", "b", "c")
    p.num_preemptions = 1
    c.num_computed_tokens = 16
    hits = {"b": 48, "p": 64, "c": 64}
    assert ids(policy.order_waiting([a, p, b, c], engine(0.9, hits))) == ["b", "p", "a", "c"]


def test_only_the_window_moves() -> None:
    policy = CacheAwareAdmission(CacheAwareAdmission.Options(window=2))
    hits = {"b": 16, "c": 48}
    assert ids(policy.order_waiting(queue("a", "b", "c"), engine(0.9, hits))) == ["b", "a", "c"]


test_conformance = conformance_test(NAME, max_examples=100)


@pytest.mark.parametrize("options", [{}, {"window": 2, "threshold": 0.0}])
def test_contract(options: dict[str, Any]) -> None:
    """The contract on every engine installed here: each asks order_waiting with the
    engine's state before the step, so each reads the hits the simulator reads (before
    0.3 the simulator asked after the step's running requests took their blocks, and
    where those evicted a waiting request's prefix, shared-prefix's p6 read 32 on vLLM
    and 0 on the simulator). vLLM's AsyncScheduler is held to less: each running request
    holds a token more there (the step in flight), so in shared-prefix under this order
    its KV runs out and it preempts p3 and p6, where the simulator and vLLM's Scheduler
    preempt none (and with ``threshold`` 0 a prefix the simulator still holds is gone
    there when p8 arrives); the admission order, the policy's decision, is the same."""
    engines, problems = installed_engines()
    assert not problems, problems
    config = SchedkitConfig.model_validate({"policy": NAME, "options": {NAME: options}})
    overlapped = [e for e in engines if e.name == "vllm-async"]
    assert_contract(config, [e for e in engines if e not in overlapped])
    [sim] = [e for e in engines if e.name == "sim"]
    for scenario in SCENARIOS if overlapped else ():
        expected = sim.run(scenario, config)
        for engine in overlapped:
            outcome = engine.run(scenario, config)
            assert outcome.admitted == expected.admitted, (engine.name, scenario.name)
    if overlapped:
        print("cache-aware on vllm-async: the admission order compared, not the contract")


# -- in the simulated engine ---------------------------------------------------------


def replay(requests: list[TraceRequest], config: str | dict[str, Any], blocks: int) -> RunResult:
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=blocks, block_size=16, hash_block_tokens=16, max_num_seqs=1)
    return SimEngine(requests, COST, sim, facade, check_invariants=True).run()


def test_a_cached_prompt_goes_before_its_prefix_is_evicted() -> None:
    """``warm`` leaves its prefix cached; ``b`` shares three of its blocks. Under fcfs,
    ``long`` and ``a`` run first and their blocks evict most of the prefix: ``b`` recomputes it.
    cache-aware admits ``b`` next, with 48 tokens from the cache."""
    requests = [
        TraceRequest("warm", 0.0, 64, 1, hash_ids=(1, 2, 3, 4)),
        TraceRequest("long", 0.0001, 64, 20),
        TraceRequest("a", 0.0002, 64, 20),
        TraceRequest("b", 0.0003, 64, 1, hash_ids=(1, 2, 3, 9)),
    ]
    config = {"policy": NAME, "options": {NAME: {"threshold": 0.0}}}
    ours = {r.request_id: r for r in replay(requests, config, blocks=12).records}
    fcfs = {r.request_id: r for r in replay(requests, "fcfs", blocks=12).records}
    order = sorted(ours, key=lambda k: ours[k].scheduled_s or 0.0)
    assert order == ["warm", "b", "long", "a"]
    assert ours["b"].cached_tokens == 48 > fcfs["b"].cached_tokens  # fcfs: the blocks went
    assert sorted(fcfs, key=lambda k: fcfs[k].scheduled_s or 0.0) == ["warm", "long", "a", "b"]


def shared_prefix_stream(n: int = 200, groups: int = 12) -> list[TraceRequest]:
    """Requests from ``groups`` conversations, each sharing a 112-token prefix, in random
    order, faster than the engine serves them."""
    rng = random.Random(0)
    requests = []
    for i in range(n):
        g = 100 * rng.randrange(groups)
        prefix = tuple(range(g, g + 7))
        requests.append(TraceRequest(f"r{i:03d}", 0.002 * i, 128, 16, hash_ids=(*prefix, -1 - i)))
    return requests


def test_the_policy_restates_vllms_engine_setting() -> None:
    """With threshold 0, the policy admits in exactly the order of the simulator's
    ``cache_aware_admission_window`` (vLLM 0.34's own rule, checked against vLLM by the
    twin tests), which is not fcfs's, and gets the same prefix hits. (With a threshold
    above 0 they differ: vLLM also reorders while the batch is full and a request it
    moved keeps its place; the policy is asked only when a seat is free.)"""
    trace = shared_prefix_stream()
    base = {"num_blocks": 60, "block_size": 16, "hash_block_tokens": 16, "max_num_seqs": 4}

    def run(config: str | dict[str, Any], **knobs: float) -> tuple[int, list[str]]:
        facade = PolicyFacade.from_config(config, strict=True)
        result = SimEngine(trace, COST, SimConfig(**base, **knobs), facade).run()  # type: ignore[arg-type]
        records = sorted(result.records, key=lambda r: (r.scheduled_s or 0.0, r.request_id))
        return result.prefix_hit_tokens, [r.request_id for r in records]

    fcfs = run("fcfs")
    engine = run("fcfs", cache_aware_admission_window=16, cache_aware_admission_threshold=0.0)
    policy = run({"policy": NAME, "options": {NAME: {"window": 16, "threshold": 0.0}}})
    assert policy == engine
    assert engine[1] != fcfs[1]
    assert engine[0] > fcfs[0]
