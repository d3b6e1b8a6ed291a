"""A faulty policy never loses a request or a KV block in the real vLLM scheduler."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import Run, free_blocks, make_request, run_until_idle, step
from schedkit import (
    Admission,
    BatchBudget,
    BlockView,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)
from schedkit.testing.contract import Stalling
from vllm.v1.engine import FinishReason


class Flaky(Policy):
    """Implements every hook; raises on ~10% of calls and otherwise answers at random."""

    class Options(PolicyOptions):
        seed: int = 0
        fault_rate: float = 0.1
        garbage: bool = False  # answer nonsense instead of raising

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.rng = random.Random(self.options.seed)  # type: ignore[attr-defined]
        self.calls = 0

    def _fault(self) -> Any:
        self.calls += 1
        if self.rng.random() < self.options.fault_rate:  # type: ignore[attr-defined]
            if self.options.garbage:  # type: ignore[attr-defined]
                return True
            raise RuntimeError("flaky policy")
        return False

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if self._fault():
            return "yes"  # type: ignore[return-value]
        return Admission.reject("unlucky") if self.rng.random() < 0.05 else None

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        if self._fault():
            return list(waiting)[1:]
        order = list(waiting)
        self.rng.shuffle(order)
        return order

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget:
        if self._fault():
            return dataclasses.replace(default, token_budget=default.token_budget * 2)
        return dataclasses.replace(
            default,
            token_budget=self.rng.randint(1, default.token_budget),
            max_running=self.rng.randint(1, default.max_running),
        )

    @hookimpl
    def select_victims(self, running: Sequence[RequestView]) -> list[RequestView]:
        if self._fault():
            return [running[0], running[0]]
        order = list(running)
        self.rng.shuffle(order)
        return order

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        if self._fault():
            return list(candidates)[: num_blocks - 1]
        return self.rng.sample(list(candidates), num_blocks)

    @hookimpl
    def on_step_finished(self, report: StepReport) -> None:
        if self._fault():
            raise RuntimeError("observer fault")

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        if self._fault():
            raise RuntimeError("observer fault")


def _load(seed: int) -> list[Any]:
    rng = random.Random(seed)
    prefixes = [[p * 1000 + t for t in range(48)] for p in range(1, 4)]
    requests = []
    for i in range(48):
        if rng.random() < 0.5:
            tail = [rng.randint(1, 999)] * rng.randint(1, 40)
            prompt: int | list[int] = rng.choice(prefixes) + tail
        else:
            prompt = rng.randint(5, 200)
        requests.append(make_request(f"q{i}", prompt, max_tokens=rng.randint(1, 60)))
    return requests


@pytest.mark.parametrize("garbage", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_faulty_policy_loses_no_request_and_no_block(
    make_scheduler: Any, register_policy: Any, seed: int, garbage: bool
) -> None:
    register_policy("flaky", Flaky)
    scheduler = make_scheduler(
        {"policy": ["flaky"], "options": {"flaky": {"seed": seed, "garbage": garbage}}},
        num_blocks=48,
        max_num_seqs=12,
        max_num_batched_tokens=256,
    )
    initial = free_blocks(scheduler)
    requests = _load(seed)
    # Arrivals interleaved with steps, so every hook runs under KV pressure.
    run = Run()
    for i, request in enumerate(requests):
        scheduler.add_request(request)
        if i % 3 == 2:
            step(scheduler, run)
    run_until_idle(scheduler, run)

    runtime = scheduler.schedkit
    assert set(run.finished) == {r.request_id for r in requests}, "a request was lost"
    rejected = {rid for rid, (reason, _) in run.finished.items() if reason == FinishReason.ABORT}
    assert len(rejected) == runtime.num_rejected
    completed = [reason for rid, (reason, _) in run.finished.items() if rid not in rejected]
    assert all(reason == FinishReason.LENGTH for reason in completed)
    assert free_blocks(scheduler) == initial
    assert scheduler.requests == {} and not scheduler.running and not scheduler.waiting
    assert any(run.preempted), "the load should preempt"
    assert runtime.policy_errors > 0
    hooks = {hook for _, hook in runtime.facade.errors}
    assert {"order_waiting", "plan_batch", "on_step_finished"} <= hooks
    assert runtime.views == {}
    # Victims and evictions were chosen by the policy, not only by vLLM's defaults.
    assert runtime.num_victims_placed > 0
    assert runtime.eviction is not None and runtime.eviction.num_evicted_by_policy > 0


def test_a_stalling_or_exiting_policy_neither_stalls_nor_stops_the_engine(
    make_scheduler: Any, register_policy: Any
) -> None:
    """Issue #35: with ``hook_budget_hard`` a 2 s hook is abandoned after 10 ms (the
    engine's order used, the policy bypassed until its call returns) and ``SystemExit``
    from a hook is a counted fault; every request finishes, every block comes back."""
    register_policy("stalling", Stalling)
    scheduler = make_scheduler(
        {"policy": ["stalling"], "hook_budget_ms": 10, "hook_budget_hard": True},
        num_blocks=48,
        max_num_seqs=12,
        max_num_batched_tokens=256,
    )
    initial = free_blocks(scheduler)
    requests = _load(4)
    run = Run()
    for i, request in enumerate(requests):
        scheduler.add_request(request)
        if i % 3 == 2:
            step(scheduler, run)
    run_until_idle(scheduler, run)

    facade = scheduler.schedkit.facade
    assert set(run.finished) == {r.request_id for r in requests}, "a request was lost"
    assert free_blocks(scheduler) == initial
    assert facade.abandoned_calls[("stalling", "order_waiting")] >= 1
    assert facade.bypassed_calls[("stalling", "order_waiting")] >= 1
    assert facade.errors[("stalling", "admit_request")] >= len(requests) // 5
