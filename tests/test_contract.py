"""The contract suite on the simulator: every scenario with every shipped policy, alone
and behind a faulty policy, keeps the engine-independent contract; and the suite's
checks catch broken engines (each mutation of an outcome fails)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from schedkit import PolicyRegistry
from schedkit.testing.contract import (
    SCENARIOS,
    Flaky,
    Outcome,
    check_outcome,
    compare_outcomes,
    run_sim,
    shipped_policies,
)

POLICIES = shipped_policies()


def policies(name: str, flaky: bool = False) -> list:  # type: ignore[type-arg]
    registry = PolicyRegistry.discover()
    chosen = [(name, registry.load(name)())]
    return [("flaky", Flaky()), *chosen] if flaky else chosen


def test_every_shipped_policy_is_in_the_suite() -> None:
    assert {"fcfs", "priority", "vtc", "lcf", "sjf", "slo", "prefix-aware"} <= set(POLICIES)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_sim_keeps_the_contract(scenario, policy: str) -> None:  # type: ignore[no-untyped-def]
    outcome = run_sim(scenario, policies(policy))
    check_outcome(scenario, outcome)
    assert outcome.policy_errors == 0


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_faulty_policy_first_changes_nothing_on_the_sim(scenario) -> None:  # type: ignore[no-untyped-def]
    clean = run_sim(scenario, policies("priority"))
    faulty = run_sim(scenario, policies("priority", flaky=True))
    check_outcome(scenario, faulty)
    assert faulty.policy_errors > 0
    compare_outcomes(clean, faulty, scenario)


def test_scenarios_exercise_what_they_say() -> None:
    by_name = {s.name: run_sim(s, policies("fcfs")) for s in SCENARIOS}
    assert any(p for p in by_name["kv-pressure"].preempted), "kv-pressure preempts"
    assert by_name["arrival-order"].admitted[:2] == ["o0", "o1"]
    assert len(by_name["chunked-prefill"].steps) > 3
    slo = run_sim(next(s for s in SCENARIOS if s.name == "slo-mix"), policies("slo"))
    assert slo.rejected, "slo rejects a tight target"
    # p3..p8 find their 32-token shared prefix cached when they arrive (engine.cached_tokens)
    cached = by_name["shared-prefix"].recorder.cached
    assert cached == {f"p{i}": 32 if i >= 3 else 0 for i in range(9)}


MUTATIONS: dict[str, Callable[[Outcome], object]] = {
    "a request never ends": lambda o: o.finished.pop(next(iter(o.finished))),
    "one output token short": lambda o: o.output_tokens.update(
        {k: v - 1 for k, v in list(o.output_tokens.items())[:1]}
    ),
    "a step reported twice": lambda o: o.recorder.reported.update(o.steps[0]),
    "a step never reported": lambda o: o.recorder.reported.subtract(o.steps[-1]),
    "an arrival unobserved": lambda o: o.recorder.arrived.subtract([next(iter(o.finished))]),
    "a finish observed twice": lambda o: next(iter(o.recorder.finished.values())).append("x"),
    "a leaked block": lambda o: setattr(o, "blocks_leaked", 1),
    "running undercounted at step reports": lambda o: setattr(
        o.recorder, "steps", [(ids, 0) for ids, _ in o.recorder.steps]
    ),
    "arrivals' num_running not brought back": lambda o: o.recorder.arrivals.clear(),
    "running undercounted at arrivals": lambda o: setattr(
        o.recorder, "arrivals", [(k, 0) for k, _ in o.recorder.arrivals]
    ),
    # the real vLLM engine driver's bug (#37): arrival_time in Unix time, clock in steps
    "arrival times on another clock": lambda o: o.recorder.clocks.update(
        {k: (1.7e9 + a, c) for k, (a, c) in o.recorder.clocks.items()}
    ),
    # the LMDeploy driver's (#37): a request arriving mid-step stamped at the next step
    "arrival times stamped at the next step": lambda o: o.recorder.clocks.update(
        {k: (a + 0.005, c + 0.005) for k, (a, c) in o.recorder.clocks.items()}
    ),
    "a clock behind an arrival": lambda o: o.recorder.clocks.update(
        {k: (a, a - 0.01) for k, (a, c) in o.recorder.clocks.items()}
    ),
    "a whole prompt read as cached": lambda o: o.recorder.cached.update(
        {k: 64 for k in o.recorder.cached}
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_check_outcome_catches(mutation: str) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "staggered")  # arrivals between steps
    outcome = run_sim(scenario, policies("fcfs"))
    check_outcome(scenario, outcome)
    broken: Outcome = copy.deepcopy(outcome)
    MUTATIONS[mutation](broken)
    with pytest.raises(AssertionError):
        check_outcome(scenario, broken)


def test_compare_outcomes_catches_a_different_batch() -> None:
    scenario = SCENARIOS[0]
    a = run_sim(scenario, policies("fcfs"))
    b = copy.deepcopy(a)
    b.engine = "other"
    compare_outcomes(a, b, scenario)
    first = next(iter(b.steps[0]))
    b.steps[0][first] += 1
    with pytest.raises(AssertionError, match="step 0 differs"):
        compare_outcomes(a, b, scenario)
    c = run_sim(scenario, policies("shortest-prompt"))
    with pytest.raises(AssertionError):
        compare_outcomes(a, c, scenario)
    d = copy.deepcopy(a)
    d.recorder.cached[next(iter(d.recorder.cached))] += 16
    with pytest.raises(AssertionError, match="prefix-cache hits at arrival"):
        compare_outcomes(a, d, scenario)
