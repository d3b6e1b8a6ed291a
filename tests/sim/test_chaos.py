"""Chaos on the simulator (issue #12 part 6): a seeded faulty policy in front of real ones.

``Flaky`` (``schedkit.testing.contract``) implements every decision hook and, on 10% of
its calls each, raises or answers nonsense. Put first in a composition, it must change
nothing but the fault counters: 10,000 mooncake requests (shared prefixes) under KV
pressure, with preemptions and evictions, all finish or are rejected with a reason, no
KV block stays referenced, and every fault is counted.
"""

from __future__ import annotations

from typing import Any

import pytest

from schedkit import Admission, Policy, PolicyFacade, RequestView, hookimpl
from schedkit.policies.builtin import PriorityPolicy
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.sim.engine import SimEngine
from schedkit.testing.contract import Flaky
from schedkit.workload import load_workload

REQUESTS = 10_000


class Counting(Flaky):
    """Flaky, counting the calls on which it raised."""

    raised = 0

    def _answer(self, nonsense: Any) -> Any:
        try:
            return super()._answer(nonsense)
        except RuntimeError:
            Counting.raised += 1
            raise


class PromptCap(Policy):
    """Rejects the longest prompts, with a reason: an admission that decides."""

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if request.num_prompt_tokens <= 30_000:
            return None
        return Admission.reject(f"prompt of {request.num_prompt_tokens} tokens over 30000")


def _run(policies: list[Any], blocks: int) -> tuple[Any, SimEngine]:
    # A quarter of the recorded rate: KV pressure without an unbounded queue, whose
    # per-step cost is the faulty list hooks' (they copy the whole queue every step).
    workload = load_workload("mooncake-conv").truncated(REQUESTS).scaled(0.25)
    cost, _, _ = make_cost_model("Llama-3-8B", "H100-SXM", 1, None)
    config = SimConfig(
        num_blocks=blocks, block_size=16, hash_block_tokens=workload.hash_block_tokens
    )
    facade = PolicyFacade(policies)
    engine = SimEngine(workload.requests, cost, config, facade)
    return engine.run(), engine


def test_a_faulty_policy_loses_nothing_under_kv_pressure() -> None:
    Counting.raised = 0
    chaos = Counting(Flaky.Options(seed=7, fault_rate=0.1))
    deciding = [("cap", PromptCap()), ("priority", PriorityPolicy())]
    result, engine = _run([("chaos", chaos), *deciding], blocks=3000)
    clean, _ = _run(deciding, blocks=3000)
    rejected = sum(r.rejected for r in result.records)
    print(
        f"\nsim chaos: {len(result.records):,} requests, {rejected:,} rejected,"
        f" {result.preemptions:,} preemptions, {engine.kv.evictions:,} blocks evicted,"
        f" {result.prefix_hit_tokens:,} prompt tokens from the cache, {Counting.raised:,}"
        f" faults raised, {result.policy_errors:,} counted, {engine.kv.num_used} blocks"
        f" left used, {result.wall_s:.1f} s (clean {clean.wall_s:.1f} s)"
    )
    assert 0 < rejected == sum(r.rejected for r in clean.records)
    reasons = {r.finish_reason for r in result.records}
    assert reasons <= {"length", "stop", "rejected"}, reasons
    assert all(r.reject_reason for r in result.records if r.rejected)
    assert engine.kv.num_free == engine.kv.num_blocks  # nothing left referenced
    assert result.preemptions > 10 and result.prefix_hit_tokens > 0  # pressure, sharing
    # Every raise is a counted fault; nonsense answers are faults too (some nonsense,
    # like evicting nothing, is a valid answer and is not).
    assert Counting.raised > 10_000
    assert result.policy_errors >= Counting.raised
    assert result.policy_errors <= 2.5 * Counting.raised  # raises + nonsense, 10% each
    # Faults fell back to the next policy: the run is the clean one, step for step (the
    # clean run may advance stretches of decode steps in one go: equal to rounding).
    finish = [r.finish_s or -1.0 for r in clean.records]  # None: rejected
    assert [r.finish_s or -1.0 for r in result.records] == pytest.approx(finish, rel=1e-9)
    assert [r.preemptions for r in result.records] == [r.preemptions for r in clean.records]
