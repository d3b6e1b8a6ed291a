"""The contract's rules, one per capability-matrix entry (``schedkit.testing.contract_run``):
each full rule catches the difference it names; a partial rule stands only where the
matrix says what differs, compares what it still can and says what it left out."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from schedkit import EngineView, Policy, PolicyFacade, RequestView, hookimpl, load_config
from schedkit.testing.contract import SCENARIOS, Outcome, Scenario, run_sim
from schedkit.testing.contract_run import (
    SIM,
    Case,
    ContractEngine,
    Relaxed,
    assert_contract,
    fresh,
    judge,
    order_unless_learning_from_reports,
    order_unless_time_bound,
    same_admission_order,
    same_victims,
    victims_where_shown_alike,
)

VICTIMS = next(s for s in SCENARIOS if s.name == "victims")


class LeastProgress(Policy):
    """Reads what the victim hook is shown: spares the request needing room, preempts
    the one with the fewest computed tokens first."""

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        return sorted(
            running, key=lambda r: (r.request_id == needing.request_id, r.num_computed_tokens)
        )


def case(scenario: Scenario, policy: Policy, implemented: frozenset[str] = frozenset()) -> Case:
    sim = run_sim(scenario, [("p", policy)])
    other = copy.deepcopy(sim)
    other.engine = "other"
    return Case(scenario, sim, other, implemented)


def test_the_victim_hook_is_watched_with_what_it_was_shown() -> None:
    outcome = run_sim(VICTIMS, [("least-progress", LeastProgress())])
    calls = outcome.recorder.victim_calls
    assert calls[0] == ("v0", [("v0", 96), ("v1", 95), ("v2", 94), ("v3", 93)])
    assert len(calls) == len([p for p in outcome.preempted if p]) == 2
    assert PolicyFacade([("p", LeastProgress())]).watch is None  # nothing unless a driver asks


def test_same_victims_catches_another_needing_or_computed_count() -> None:
    c = case(VICTIMS, LeastProgress())
    assert same_victims(c) == ""
    needing, running = c.other.recorder.victim_calls[0]
    c.other.recorder.victim_calls[0] = ("v1", running)
    with pytest.raises(AssertionError, match="victim call 0 shown needing v1"):
        same_victims(c)
    c.other.recorder.victim_calls[0] = (needing, [(r, n - 1) for r, n in running])
    with pytest.raises(AssertionError, match="victim call 0"):
        same_victims(c)


def test_same_victims_catches_other_victims() -> None:
    c = case(VICTIMS, LeastProgress())
    step = next(i for i, p in enumerate(c.other.preempted) if p)
    c.other.preempted[step] = ["v9"]
    with pytest.raises(AssertionError, match=r"victims \[\['v9'\]"):
        same_victims(c)


def test_the_partial_victim_rule_compares_calls_shown_alike_and_names_the_others() -> None:
    c = case(VICTIMS, LeastProgress())
    assert victims_where_shown_alike(c) == ""
    step = next(i for i, p in enumerate(c.other.preempted) if p)
    c.other.preempted[step] = ["v9"]
    with pytest.raises(AssertionError, match=r"victim call 0 \(shown as on sim\) preempted"):
        victims_where_shown_alike(c)
    _, running = c.other.recorder.victim_calls[0]
    c.other.recorder.victim_calls[0] = ("v1", running)  # shown otherwise: not compared
    note = victims_where_shown_alike(c)
    assert (
        note
        == "victim call 0 not compared: needing v1 of v0,v1,v2,v3, sim needing v0 of v0,v1,v2,v3"
    )


def test_the_order_of_a_policy_learning_from_reports_may_differ_where_reports_lag() -> None:
    staggered = next(s for s in SCENARIOS if s.name == "staggered")
    c = case(staggered, LeastProgress())
    c.other.admitted[3], c.other.admitted[4] = c.other.admitted[4], c.other.admitted[3]
    with pytest.raises(AssertionError, match="admission order"):
        order_unless_learning_from_reports(c)
    learning = Case(c.scenario, c.sim, c.other, frozenset({"on_step_finished"}))
    assert "the policy learns from step reports" in order_unless_learning_from_reports(learning)
    learning.other.admitted.pop()
    with pytest.raises(AssertionError, match="admitted"):
        order_unless_learning_from_reports(learning)


def test_a_partial_rule_needs_the_matrix_to_say_what_differs() -> None:
    def run(scenario: Scenario, config: object) -> Outcome:
        raise NotImplementedError

    relaxed = Relaxed(victims_where_shown_alike, "select_victims")
    ContractEngine("lmdeploy", run, "lmdeploy", partial={"select_victims": relaxed})
    with pytest.raises(ValueError, match="the capability matrix says nothing of it for 'sim'"):
        ContractEngine("sim-ish", run, "sim", partial={"select_victims": relaxed})
    with pytest.raises(ValueError, match="no rule 'select_evictions' to relax"):
        ContractEngine("x", run, "lmdeploy", partial={"select_evictions": relaxed})


def test_judge_names_the_first_broken_rule_by_its_matrix_entry() -> None:
    c = case(VICTIMS, LeastProgress())
    engine = ContractEngine("other", lambda s, cfg: c.other, "vllm", same_batches=True)
    assert judge(c, engine).ok
    c.other.admitted.reverse()  # the contract holds; the order differs
    row = judge(c, engine)
    assert not row.ok and row.detail.startswith("order_waiting: admission order"), row
    assert judge(Case(c.scenario, c.sim, c.sim, c.implemented), SIM).ok


def test_assert_contract_fails_listing_every_difference() -> None:
    def narrow(scenario: Scenario, config: object) -> Outcome:
        one = scenario.config.model_copy(update={"max_num_seqs": 1})
        outcome = run_sim(Scenario(scenario.name, scenario.requests, one), [])
        outcome.engine = "narrow"
        return outcome

    engine = ContractEngine("narrow", narrow, "sim", same_batches=True)
    rows = assert_contract("fcfs", [SIM], SCENARIOS[:2])
    assert [r.ok for r in rows] == [True, True]
    with pytest.raises(AssertionError, match="narrow, arrival-order: plan_batch: step 0 differs"):
        assert_contract({"policy": ["fcfs"]}, [SIM, engine], SCENARIOS[:2])


class WaitRatio(Policy):
    """Orders by wait per prompt token (HRRN's order): unchanged when time runs at
    another pace, changed when its clock reads late."""

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> list[Any]:
        return sorted(waiting, key=lambda r: -(engine.clock - r.arrival_time) / r.num_prompt_tokens)


def test_a_policy_reading_waits_is_told_from_one_that_does_not() -> None:
    from schedkit.testing.contract_run import is_time_bound

    def bound(name: str, scenario: str, options: dict[str, object] | None = None) -> bool:
        config = load_config({"policy": [name], "options": {name: options or {}}})
        chosen = next(s for s in SCENARIOS if s.name == scenario)
        return is_time_bound(chosen, config, run_sim(chosen, fresh(config)))

    for scenario in ("arrival-waits", "slo-mix", "staggered"):
        assert not bound("fcfs", scenario) and not bound("shortest-prompt", scenario)
        assert not bound("lcf", scenario) and not bound("vtc", scenario)
    assert bound("shortest-prompt", "arrival-waits", {"max_wait_s": 0.05})  # overdue first
    assert bound("slo", "slo-mix")  # predicted TTFT against targets


def test_an_order_by_a_ratio_of_waits_is_told_by_a_late_clock() -> None:
    slo_mix = next(s for s in SCENARIOS if s.name == "slo-mix")
    decided = run_sim(slo_mix, [("ratio", WaitRatio())])
    late = run_sim(slo_mix, [("ratio", WaitRatio())], late_s=1.0)
    assert late.admitted != decided.admitted
    assert run_sim(slo_mix, [("ratio", WaitRatio())], late_s=0.0).admitted == decided.admitted


def test_the_order_of_a_time_bound_policy_may_differ_on_an_engine_paced_otherwise() -> None:
    staggered = next(s for s in SCENARIOS if s.name == "staggered")
    c = case(staggered, LeastProgress())
    c.other.admitted[3], c.other.admitted[4] = c.other.admitted[4], c.other.admitted[3]
    rule = order_unless_time_bound(same_admission_order, "its clock runs per forward")
    with pytest.raises(AssertionError, match="admission order"):
        rule(c)
    bound = Case(c.scenario, c.sim, c.other, c.implemented, time_bound=True)
    assert rule(bound).endswith(
        "the policy reads waits or deadlines, and its clock runs per forward"
    )
    bound.other.admitted.pop()
    with pytest.raises(AssertionError, match="admitted"):
        rule(bound)
