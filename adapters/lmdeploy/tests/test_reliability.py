"""A faulty policy never loses a request or a KV block in LMDeploy's real scheduler.

A random workload (shared prefixes, tight KV so that LMDeploy preempts and evicts,
prompts longer than the prefill budget so that it chunks) runs with ``Flaky`` first,
raising or answering nonsense on 10-30% of its calls to every decision hook, ahead of a
victim policy and an eviction policy. Every request must finish with its full output,
every token must be reported once, and after every step each KV block must be free or
held exactly once (``check_blocks``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from schedkit import PolicyRegistry
from schedkit.sim.config import SimConfig
from schedkit.testing.contract import Flaky, Scenario, check_outcome
from schedkit.workload import TraceRequest

from schedkit_lmdeploy.harness.contract import run_lmdeploy


def workload(seed: int, n: int = 60) -> Scenario:
    rng = random.Random(seed)
    requests = tuple(
        TraceRequest(
            f"r{i}",
            round(rng.uniform(0, 0.5), 2),
            rng.choice([40, 64, 96, 200, 330]),
            rng.randint(2, 60),
            tenant=rng.choice(["a", "b"]),
            priority=rng.randint(0, 3),
            hash_ids=(rng.randint(0, 3), 100 + i),
        )
        for i in range(n)
    )
    config = SimConfig(
        num_blocks=40, block_size=32, max_num_seqs=8, max_num_batched_tokens=256,
        hash_block_tokens=32,
    )  # fmt: skip
    return Scenario(f"random-{seed}", requests, config)


def chain(*names: str, fault_rate: float, seed: int) -> list[Any]:
    registry = PolicyRegistry.discover()
    flaky = Flaky(Flaky.Options(seed=seed, fault_rate=fault_rate))
    return [("flaky", flaky), *((name, registry.load(name)()) for name in names)]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault_rate", [0.1, 0.3])
def test_a_faulty_policy_loses_no_request_and_no_block(seed: int, fault_rate: float) -> None:
    scenario = workload(seed)
    seen: list[Any] = []
    outcome = run_lmdeploy(
        scenario, chain("priority", "lfu", fault_rate=fault_rate, seed=seed), conserve=True,
        probe=seen.append,
    )  # fmt: skip
    check_outcome(scenario, outcome)
    assert outcome.policy_errors > 0
    assert any(outcome.preempted), "no preemption: the victim hook was never asked"
    runtime = seen[0].schedkit
    assert runtime.num_evicted_by_policy > 0, "lfu never chose an eviction"
    assert runtime.num_victims_placed > 0, "priority never chose a victim"


def test_the_workload_presses_lmdeploy() -> None:
    """The random workload makes LMDeploy preempt, evict and chunk, stock too."""
    scenario = workload(1)
    seen: list[Any] = []
    stock = run_lmdeploy(scenario, None, conserve=True, probe=seen.append)
    assert any(stock.preempted)
    trie_hits = seen[0].block_trie.stats.num_hit_tokens
    assert trie_hits > 0  # shared prefixes were cached and reused
    assert sum(r.prompt_tokens for r in scenario.requests) > 40 * 32  # more than KV holds
    budget = scenario.config.max_num_batched_tokens
    assert any(n == budget for step in stock.steps for n in step.values()), "no chunk ran"
