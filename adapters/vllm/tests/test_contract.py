"""The contract suite on vLLM's real scheduler, model-less: every scenario with every
shipped policy, on the synchronous scheduler (as the CPU engine runs it) and on the
AsyncScheduler driven like ``EngineCore.step_with_batch_queue`` (as every GPU runs it).

Synchronous vLLM must schedule the identical batch at every step as the simulator;
async vLLM must keep the contract (every token reported exactly once, every request
finished once with its output, no block leaked) and reach the same per-request outcomes.
"""

from __future__ import annotations

from typing import Any

import pytest
from schedkit import PolicyRegistry
from schedkit.testing.contract import (
    SCENARIOS,
    Flaky,
    check_outcome,
    compare_outcomes,
    run_sim,
    shipped_policies,
)

from schedkit_vllm import AsyncScheduler, Scheduler
from schedkit_vllm.harness.contract import run_vllm

POLICIES = shipped_policies()
ENGINES = {
    "sync": {"cls": Scheduler, "batch_queue": 1},
    "async": {"cls": AsyncScheduler, "batch_queue": 2},
}


def policies(name: str, flaky: bool = False) -> list[Any]:
    chosen = [(name, PolicyRegistry.discover().load(name)())]
    return [("flaky", Flaky()), *chosen] if flaky else chosen


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_sync_vllm_schedules_as_the_simulator(scenario: Any, policy: str) -> None:
    sim = run_sim(scenario, policies(policy))
    vllm = run_vllm(scenario, policies(policy), **ENGINES["sync"])
    check_outcome(scenario, vllm)
    compare_outcomes(sim, vllm, scenario)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_async_vllm_keeps_the_contract(scenario: Any, policy: str) -> None:
    sim = run_sim(scenario, policies(policy))
    vllm = run_vllm(scenario, policies(policy), **ENGINES["async"])
    check_outcome(scenario, vllm)
    assert vllm.rejected == sim.rejected
    assert vllm.output_tokens == sim.output_tokens


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_faulty_policy_first_changes_nothing(scenario: Any, engine: str) -> None:
    clean = run_vllm(scenario, policies("lcf"), **ENGINES[engine])
    faulty = run_vllm(scenario, policies("lcf", flaky=True), **ENGINES[engine])
    check_outcome(scenario, faulty)
    assert faulty.policy_errors > 0
    compare_outcomes(clean, faulty, scenario)


# -- the GPU path: AsyncScheduler under a batch queue of 2 -------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_without_a_config_async_schedules_as_stock_vllm(scenario: Any) -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler as StockAsync

    stock = run_vllm(scenario, None, cls=StockAsync, batch_queue=2)
    ours = run_vllm(scenario, None, cls=AsyncScheduler, batch_queue=2)
    assert ours.steps == stock.steps and ours.preempted == stock.preempted
    assert ours.finished == stock.finished and ours.output_tokens == stock.output_tokens


@pytest.mark.parametrize("policy", ["vtc", "lcf", "slo", "prefix-aware-queued"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_aborts_mid_flight_keep_the_contract(scenario: Any, policy: str) -> None:
    # Abort two requests while their batches are in flight (one step after they were
    # first scheduled, before that step's results are processed).
    probe = run_vllm(scenario, policies(policy), **ENGINES["async"])
    victims = [rid for rid in probe.admitted if rid not in probe.rejected][1:3]
    first = {rid: next(i for i, s in enumerate(probe.steps) if rid in s) for rid in victims}
    aborts: dict[int, list[str]] = {}
    for rid, step in first.items():
        aborts.setdefault(step + 1, []).append(rid)
    outcome = run_vllm(scenario, policies(policy), aborts=aborts, **ENGINES["async"])
    check_outcome(scenario, outcome, aborted=victims)
    assert all(outcome.finished[rid] == "aborted" for rid in victims)


def test_async_lane_really_pipelines(monkeypatch: pytest.MonkeyPatch) -> None:
    # With a batch queue of 2, schedule() N+1 runs before update_from_output(N).
    calls: list[str] = []
    schedule, update = AsyncScheduler.schedule, AsyncScheduler.update_from_output

    def logged_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("s")
        return schedule(self, *args, **kwargs)

    def logged_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("u")
        return update(self, *args, **kwargs)

    monkeypatch.setattr(AsyncScheduler, "schedule", logged_schedule)
    monkeypatch.setattr(AsyncScheduler, "update_from_output", logged_update)
    scenario = next(s for s in SCENARIOS if s.name == "two-tenant")
    outcome = run_vllm(scenario, policies("vtc"), **ENGINES["async"])
    check_outcome(scenario, outcome)
    trace = "".join(calls)
    assert trace.startswith("ss") and "susu" in trace, trace[:40]
    assert trace.count("s") == trace.count("u")
