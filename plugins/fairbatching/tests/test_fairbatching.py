"""fairbatching: the step-time fit, token deadlines, the order and the step budget on
hand-made states, the engine contract; then in the simulated engine: decodes keep their
TPOT beside a burst of prompts, and prefill is not starved."""

from __future__ import annotations

from typing import Any

import pytest
from schedkit import (
    BatchBudget,
    EngineState,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    StepReport,
)
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_fairbatching import FairBatching, StepFit

NAME = "fairbatching"
DEFAULT = BatchBudget(token_budget=8192, max_running=64, prefill_chunk=0)


def request(rid: str, prompt: int, *, arrival: float = 0.0, output: int = 0) -> RequestState:
    state = RequestState(rid, prompt, 64, arrival_time=arrival)
    state.num_output_tokens = output
    state.num_computed_tokens = prompt + output if output else 0
    return state


def step(clock: float, *scheduled: RequestState, tokens: int = 1) -> StepReport:
    return StepReport(num_steps=1, duration_s=0.01, num_prefill_tokens=0,
                      num_decode_tokens=tokens, scheduled=scheduled)  # fmt: skip


def engine_at(clock: float, running: int = 1) -> EngineState:
    state = EngineState(kv_blocks_total=1000, block_size=16)
    state.clock, state.num_running = clock, running
    return state


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-fairbatching"
    assert entry.load() is FairBatching


def test_the_step_fit_recovers_a_line_and_keeps_its_prior_until_steps_vary() -> None:
    fit = StepFit(0.01, 0.5, 0.1)
    fit.add(100, 0.007)
    fit.add(100, 0.007)
    assert fit.coefficients() == (0.5, 0.1)  # one step size seen: the prior
    for tokens in (10, 200, 1000, 4000):
        fit.add(tokens, 0.005 + 2e-5 * tokens)
    a, b = fit.coefficients()
    assert a == pytest.approx(0.005)
    assert b == pytest.approx(2e-5)


def test_decode_deadlines_count_from_the_first_token_or_the_last_when_behind() -> None:
    policy = FairBatching(FairBatching.Options(ttft_ms=1000, tpot_ms=50))
    r = request("r", 100, arrival=0.0, output=1)
    assert policy.next_due(r) == pytest.approx(1.05)  # unseen: arrival + 1 s + 1 x 50 ms
    policy.on_step_finished(step(0.2, r), engine_at(0.2))  # its first token at 0.2 s
    r.num_output_tokens = 3
    policy.on_step_finished(step(0.25, r), engine_at(0.25))
    assert policy.next_due(r) == pytest.approx(0.35)  # 0.2 s + 3 x 50 ms
    policy.on_step_finished(step(5.0, r), engine_at(5.0))  # a long stall
    assert policy.next_due(r) == pytest.approx(5.05)  # behind: its last token + 50 ms


def test_least_slack_first_and_resuming_requests_before_all() -> None:
    policy = FairBatching(FairBatching.Options(prior_tokens_per_s=1000))
    long = request("long", 900, arrival=0.0)  # due at 1.0 s, needs 0.9 s: start by 0.1
    short = request("short", 10, arrival=0.0)  # start by 0.99
    late = request("late", 10, arrival=0.5)  # start by 1.49
    resumed = request("resumed", 10, arrival=2.0, output=4)
    order = sorted([late, short, resumed, long], key=policy.waiting_key)
    assert [r.request_id for r in order] == ["resumed", "long", "short", "late"]


def test_the_step_fits_the_tightest_decode_until_a_first_token_is_tighter() -> None:
    policy = FairBatching(FairBatching.Options(tpot_ms=50, prior_step_s=0.01,
                                               prior_tokens_per_s=10_000))  # fmt: skip
    d = request("d", 100, arrival=0.0, output=1)
    policy.on_step_finished(step(1.0, d), engine_at(1.0))  # its next token due at 1.05 s
    budget = policy.plan_batch(engine_at(1.0, running=2), DEFAULT)
    assert budget is not None and budget.token_budget == 400  # (0.05 - 0.01) x 10,000
    tight = request("tight", 50, arrival=0.0)  # first token due at 1.0 s: more urgent
    policy.on_request_arrived(tight)
    assert policy.plan_batch(engine_at(1.0, running=2), DEFAULT) is None
    policy.on_request_finished(tight)
    budget = policy.plan_batch(engine_at(1.06, running=2), DEFAULT)  # the decode is late
    assert budget is not None and budget.token_budget == 3  # one per running request, + 1


def test_a_finish_told_before_its_last_step_report_is_not_brought_back() -> None:
    """The simulator reports a run of decode steps after the finishes it caused: a stale
    decode would pin every later step's deadline in the past (steps of one token)."""
    policy = FairBatching()
    d = request("d", 100, arrival=0.0, output=1)
    policy.on_step_finished(step(0.1, d), engine_at(0.1))
    policy.on_request_finished(d)
    policy.on_step_finished(step(0.5, d), engine_at(0.5))
    assert policy.decoding == {}
    assert policy.plan_batch(engine_at(1.0, running=0), DEFAULT) is None


test_conformance = conformance_test(NAME, max_examples=100)
test_contract = contract_test(NAME)  # on every engine installed here


# -- in the simulated engine ---------------------------------------------------------

COST = LinearCostModel(c0=0.01, c_prefill=2e-5, c_decode=2e-5, c_kv=0.0)


def replay(requests: list[TraceRequest], config: str | dict[str, Any]) -> RunResult:
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=20_000, max_num_seqs=64, max_num_batched_tokens=8192)
    return SimEngine(requests, COST, sim, facade, check_invariants=True).run()


def test_decodes_keep_their_tpot_beside_a_burst_and_every_prompt_is_served() -> None:
    """Eight interactive requests (TTFT 100 ms, TPOT 50 ms) decode; at 0.3 s, 40 long
    prompts with a loose TTFT target (5 s) arrive at once. fcfs (stall-free) fills every
    step with 8,192 prompt tokens, ~170 ms a step: the interactive ones miss their TPOT.
    fairbatching spends their banked slack, then sizes the steps to their deadlines while
    the prompts' first-token deadlines are further off; every prompt is still served."""
    decodes = [TraceRequest(f"d{i}", 0.0, 64, 60, slo_ttft_ms=100, slo_tpot_ms=50)
               for i in range(8)]  # fmt: skip
    burst = [TraceRequest(f"p{i:02d}", 0.3, 4000, 4, slo_ttft_ms=5000) for i in range(40)]
    ours, fcfs = replay(decodes + burst, NAME), replay(decodes + burst, "fcfs")
    assert all(r.finish_reason == "length" for r in ours.records)

    def worst_tpot_ms(run: RunResult) -> float:
        return max(
            1000.0 * (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
            for r in run.records
            if r.request_id.startswith("d") and r.finish_s and r.first_token_s
        )

    assert worst_tpot_ms(ours) < 50.0 < worst_tpot_ms(fcfs)
