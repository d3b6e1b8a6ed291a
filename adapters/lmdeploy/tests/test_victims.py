"""Preemption victims on LMDeploy's real scheduler.

LMDeploy preempts the running sequence that cannot grow, walking them from the newest
(``Scheduler.schedule_running``): no victim choice. With a victim policy the sequence
that cannot grow preempts the policy's victims first, in order, until it fits. In this
scenario four requests of 64 prompt tokens decode 120 tokens each into 12 blocks of 32:
LMDeploy must preempt twice, and with ``priority`` and ``lcf`` it preempts the requests
the simulator preempts.
"""

from __future__ import annotations

from typing import Any

import pytest
from schedkit import PolicyRegistry
from schedkit.testing.contract import SCENARIOS, check_outcome, run_sim

from schedkit_lmdeploy.harness.contract import run_lmdeploy

VICTIMS = next(s for s in SCENARIOS if s.name == "victims")  # the contract's scenario


def chosen(name: str) -> list[Any]:
    return [(name, PolicyRegistry.discover().load(name)())]


def victims(outcome: Any) -> list[list[str]]:
    return [step for step in outcome.preempted if step]


def test_stock_lmdeploy_preempts_the_sequence_that_cannot_grow() -> None:
    stock = run_lmdeploy(VICTIMS, None)
    assert victims(stock) == [["v1"], ["v0"]]
    fcfs = run_lmdeploy(VICTIMS, chosen("fcfs"))  # no victim hook: LMDeploy's choice
    check_outcome(VICTIMS, fcfs)
    assert fcfs.steps == stock.steps and fcfs.preempted == stock.preempted


@pytest.mark.parametrize("policy", ["priority", "lcf"])
def test_the_policys_victims_are_the_simulators(policy: str) -> None:
    outcome = run_lmdeploy(VICTIMS, chosen(policy))
    check_outcome(VICTIMS, outcome)
    assert victims(outcome) == victims(run_sim(VICTIMS, chosen(policy)))
    assert victims(outcome) != [["v1"], ["v0"]], "the policy changed nothing"


def test_priority_preempts_the_worst_priority_first() -> None:
    outcome = run_lmdeploy(VICTIMS, chosen("priority"))
    assert victims(outcome)[0] == ["v0"]
    assert outcome.finished == dict.fromkeys(["v0", "v1", "v2", "v3"], "length")
