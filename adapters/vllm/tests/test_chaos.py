"""Chaos on vLLM's real scheduler (issue #12 part 6): a seeded faulty policy in front of
real ones, model-less, synchronous and async.

``Flaky`` (``schedkit.testing.contract``) implements every decision hook and, on 10% of
its calls each, raises or answers nonsense; here it runs first, ``priority`` (order and
victims) and ``PromptCap`` (admission) after it. Through ``run_vllm`` (the contract
suite's driver: sync as ``EngineCore.step``, async as ``step_with_batch_queue``), 1,000
mooncake requests with shared prefixes on a KV cache far smaller than the running batch
must all finish with their whole output or be rejected with a reason, leave no KV block
referenced and have every raise counted as a policy fault, while vLLM preempts decoding
requests and evicts cached prefixes. Since a fault falls back to the next policy, the
faulty run must decide as the clean one does: step for step on the synchronous
scheduler, request for request on the async one.

Run with ``-s`` for the figures (``benchmarks/engines/chaos-vllm.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import Field
from schedkit import Admission, Policy, PolicyOptions, RequestView, hookimpl
from schedkit.policies.builtin import PriorityPolicy
from schedkit.sim.config import SimConfig
from schedkit.testing.contract import Flaky, Outcome, Scenario, check_outcome, compare_outcomes
from schedkit.workload import load_workload

from schedkit_vllm import AsyncScheduler, Scheduler
from schedkit_vllm.harness.contract import run_vllm

REQUESTS = 1_000
SEED = 7
FAULT_RATE = 0.1
ENGINES: dict[str, dict[str, Any]] = {
    "sync": {"cls": Scheduler, "batch_queue": 1},
    "async": {"cls": AsyncScheduler, "batch_queue": 2},
}


@functools.cache
def chaos_scenario() -> Scenario:
    """The first 1,000 mooncake-conv requests, arriving 100x faster, prompts 1/32 and
    outputs 1/4 as long (so a 512-token hash id marks one shared 16-token block), with
    seeded priorities 0-2. 64 requests may run, but 600 blocks hold ~9,600 tokens, the
    prompts of about 20: decoding runs out of blocks and vLLM preempts, and every new
    prompt evicts cached prefixes."""
    workload = load_workload("mooncake-conv").truncated(REQUESTS).scaled(100)
    rng = random.Random(SEED)
    requests = tuple(
        dataclasses.replace(
            r,
            prompt_tokens=math.ceil(r.prompt_tokens / 32),
            output_tokens=math.ceil(r.output_tokens / 4),
            priority=rng.randrange(3),
        )
        for r in workload.requests
    )
    config = SimConfig(
        num_blocks=600,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=1024,
        hash_block_tokens=workload.hash_block_tokens // 32,
    )
    return Scenario("chaos", requests, config, what="faulty policy under KV pressure")


class Counting(Flaky):
    """Flaky, counting the calls on which it raised and those it answered nonsense."""

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.raised = 0
        self.nonsense = 0

    def _answer(self, nonsense: Any) -> Any:
        try:
            answer = super()._answer(nonsense)
        except RuntimeError:
            self.raised += 1
            raise
        self.nonsense += answer is not None
        return answer


class PromptCap(Policy):
    """Rejects prompts longer than ``max_prompt_tokens``: an admission that decides."""

    class Options(PolicyOptions):
        max_prompt_tokens: int = Field(default=2048, gt=0)

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        cap: int = self.options.max_prompt_tokens  # type: ignore[attr-defined]
        if request.num_prompt_tokens <= cap:
            return None
        return Admission.reject(
            f"prompt of {request.num_prompt_tokens} tokens over the cap of {cap}",
            code="prompt_cap",
        )


@dataclass
class Pressure:
    """What vLLM's KV cache went through: cached blocks evicted to make room (the block
    pool's own eviction call), and prompt tokens found in the prefix cache at admission
    (vLLM's prefix-cache stats, as its metrics report them)."""

    evictions: int = 0
    prefix_hits: int = 0

    def probe(self, scheduler: Any) -> None:
        pool = scheduler.kv_cache_manager.block_pool
        evict, update = pool._maybe_evict_cached_block, scheduler.update_from_output

        def counted_evict(block: Any) -> bool:
            evicted: bool = evict(block)
            self.evictions += evicted
            return evicted

        def counted_update(*args: Any, **kwargs: Any) -> Any:
            outputs = update(*args, **kwargs)
            for bundle in outputs.values():
                if bundle.scheduler_stats is not None:
                    self.prefix_hits += bundle.scheduler_stats.prefix_cache_stats.hits
            return outputs

        pool._maybe_evict_cached_block = counted_evict
        scheduler.update_from_output = counted_update


@dataclass
class ChaosRun:
    outcome: Outcome
    pressure: Pressure
    flaky: Counting | None
    wall_s: float

    @property
    def preemptions(self) -> int:
        return sum(len(step) for step in self.outcome.preempted)

    def figures(self) -> str:
        o, p = self.outcome, self.pressure
        faults = (
            f"{self.flaky.raised} faults raised, {self.flaky.nonsense} nonsense answers,"
            f" {o.policy_errors} counted"
            if self.flaky is not None
            else "no faulty policy"
        )
        return (
            f"{o.engine}: {len(o.finished)} requests, {len(o.steps)} steps,"
            f" {self.preemptions} preemptions, {p.evictions} prefix-cache evictions,"
            f" {p.prefix_hits} prompt tokens from the cache, {faults},"
            f" {len(o.rejected)} rejected, {o.blocks_leaked} KV blocks leaked,"
            f" {self.wall_s:.1f} s"
        )


def run_chaos(engine: str, faulty: bool) -> ChaosRun:
    """The chaos scenario on ``engine`` ("sync" or "async"), with ``Flaky`` first when
    ``faulty``, ``priority`` and ``PromptCap`` after it."""
    flaky = Counting(Flaky.Options(seed=SEED, fault_rate=FAULT_RATE)) if faulty else None
    policies: list[tuple[str, Policy]] = [("flaky", flaky)] if flaky is not None else []
    policies += [("priority", PriorityPolicy()), ("prompt-cap", PromptCap())]
    pressure = Pressure()
    started = time.perf_counter()
    outcome = run_vllm(chaos_scenario(), policies, probe=pressure.probe, **ENGINES[engine])
    return ChaosRun(outcome, pressure, flaky, time.perf_counter() - started)


@pytest.fixture(scope="module", params=list(ENGINES))
def runs(request: pytest.FixtureRequest) -> tuple[ChaosRun, ChaosRun]:
    """The faulty run and the clean one on each engine, once for the module (the clean
    one first: the first run in a process also pays for vLLM's one-time set-up)."""
    clean = run_chaos(request.param, faulty=False)
    chaos = run_chaos(request.param, faulty=True)
    print(f"\nclean on {clean.figures()}\nchaos on {chaos.figures()}")
    return chaos, clean


def test_a_faulty_policy_loses_nothing_under_kv_pressure(runs: tuple[ChaosRun, ChaosRun]) -> None:
    chaos, _ = runs
    outcome, flaky = chaos.outcome, chaos.flaky
    assert flaky is not None
    check_outcome(chaos_scenario(), outcome)  # every request ended once, tokens reported
    assert set(outcome.finished.values()) <= {"length", "rejected"}
    assert outcome.rejected and all(outcome.rejected.values())  # each names its reason
    assert outcome.blocks_leaked == 0
    # Pressure and sharing: vLLM preempted decoding requests, evicted cached prefixes
    # and admitted prompts on cached ones.
    assert chaos.preemptions > 50, outcome.preempted
    assert chaos.pressure.evictions > 1_000
    assert chaos.pressure.prefix_hits > 0
    # Every raise is a counted fault, and so is every nonsense answer: on vLLM each one
    # is refused (a repeated or missing request or block, a budget over the engine's),
    # where on the simulator some (evicting nothing) are valid.
    assert flaky.raised > 1_000
    assert outcome.policy_errors == flaky.raised + flaky.nonsense


def test_a_faulty_policy_changes_no_decision(runs: tuple[ChaosRun, ChaosRun]) -> None:
    chaos, clean = runs
    scenario = chaos_scenario()
    check_outcome(scenario, clean.outcome)
    assert clean.outcome.policy_errors == 0
    # Sync: the identical batch and victims at every step. Async (a batch queue of 2,
    # steps not comparable by design): the same admissions, victims and outcomes.
    compare_outcomes(clean.outcome, chaos.outcome, scenario)
    assert chaos.pressure == clean.pressure
