"""priority-aging: installed, selectable only by config, ages as specified, conforming."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError
from schedkit import EngineState, PolicyFacade, PolicyRegistry, RequestState, load_config
from schedkit.errors import PolicyConfigError
from schedkit.plugins import implemented_hooks
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_priority_aging import PriorityAging, effective_priority

NAME = "priority-aging"


def request(request_id: str, priority: int, arrival: float, *, computed: int = 0) -> RequestState:
    state = RequestState(request_id, 64, max_tokens=16, arrival_time=arrival, priority=priority)
    state.num_computed_tokens = computed
    return state


def engine_at(clock: float) -> EngineState:
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    engine.clock = clock
    return engine


def ids(requests: Sequence[Any] | None) -> list[str]:
    assert requests is not None
    return [r.request_id for r in requests]


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-priority-aging"
    assert entry.target == "schedkit_priority_aging:PriorityAging"
    assert entry.load() is PriorityAging


def test_selectable_by_config_not_by_default() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.implemented == {"order_waiting", "select_victims"}
    assert NAME not in load_config(None).policy


def test_cli_lists_it_with_its_hooks_and_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    entry = next(e for e in json.loads(result.stdout) if e["name"] == NAME)
    assert entry["distribution"] == "schedkit-priority-aging"
    assert entry["hooks"] == implemented_hooks(PriorityAging)
    assert "aging_rate" in entry["options_schema"]["properties"]


# --- behaviour ----------------------------------------------------------------------


def test_effective_priority_improves_with_waiting() -> None:
    old = request("old", 2, arrival=0.0)
    assert effective_priority(old, 10.0, 0.1) == pytest.approx(1.0)
    assert effective_priority(old, 30.0, 0.1) == pytest.approx(-1.0)


def test_an_old_low_priority_request_overtakes_fresh_high_priority_ones() -> None:
    waiting = [
        request("fresh-high", 0, arrival=19.0),  # effective -0.1 at t=20
        request("old-low", 1, arrival=0.0),  # effective -1.0
        request("mid-high", 0, arrival=15.0),  # effective -0.5
        request("older-high", 0, arrival=5.0),  # effective -1.5
    ]
    order = PriorityAging(aging_rate=0.1).order_waiting(waiting, engine_at(20.0))
    assert ids(order) == ["older-high", "old-low", "mid-high", "fresh-high"]
    assert ids(waiting) == ["fresh-high", "old-low", "mid-high", "older-high"]  # untouched


def test_equal_effective_priority_goes_by_arrival() -> None:
    # priority 1 at t=0 and priority 0 at t=10 are both 0.0 at t=10 with rate 0.1
    waiting = [request("later", 0, arrival=10.0), request("earlier", 1, arrival=0.0)]
    order = PriorityAging(aging_rate=0.1).order_waiting(waiting, engine_at(10.0))
    assert ids(order) == ["earlier", "later"]


def test_order_does_not_depend_on_the_clock() -> None:
    waiting = [request(f"r{i}", i % 3, arrival=i * 0.7) for i in range(12)]
    policy = PriorityAging(aging_rate=0.5)
    assert ids(policy.order_waiting(waiting, engine_at(9.0))) == ids(
        policy.order_waiting(waiting, engine_at(900.0))
    )


def test_victims_are_the_worst_effective_priority_then_the_newest() -> None:
    running = [
        request("old-low", 1, arrival=0.0),  # effective -1.0 at t=20
        request("new-high", 0, arrival=18.0),  # effective -0.2
        request("newer-high", 0, arrival=18.0 + 1e-3),
        request("old-high", 0, arrival=1.0),  # effective -1.9
    ]
    policy = PriorityAging(aging_rate=0.1)
    victims = policy.select_victims(running, running[0], engine_at(20.0))
    assert ids(victims) == ["newer-high", "new-high", "old-low", "old-high"]


def test_exact_victim_ties_go_to_the_last_admitted() -> None:
    running = [request("admitted-first", 0, arrival=1.0), request("admitted-last", 0, 1.0)]
    policy = PriorityAging()
    for needing in running:
        victims = policy.select_victims(running, needing, engine_at(2.0))
        assert ids(victims) == ["admitted-last", "admitted-first"]


def test_through_the_facade_with_options() -> None:
    config = {"policy": NAME, "options": {NAME: {"aging_rate": 1.0}}}
    facade = PolicyFacade.from_config(config, strict=True)
    waiting = [request("high", 0, arrival=9.0), request("low", 5, arrival=0.0)]
    # with rate 1, "low" (5 levels down) overtakes "high" after 5 s more of waiting
    assert ids(facade.order_waiting(waiting, engine_at(10.0))) == ["low", "high"]
    slow = PolicyFacade.from_config({"policy": NAME, "options": {NAME: {"aging_rate": 0.1}}})
    assert ids(slow.order_waiting(waiting, engine_at(10.0))) == ["high", "low"]


def test_composes_after_another_victim_policy() -> None:
    facade = PolicyFacade.from_config("lcf+priority-aging", strict=True)
    running = [request("low-busy", 1, arrival=0.0, computed=900), request("high", 0, 5.0)]
    running[1].num_computed_tokens = 10
    # lcf (consulted first) picks victims; priority-aging still orders the queue
    assert ids(facade.select_victims(running, running[0], engine_at(6.0))) == [
        "high",
        "low-busy",
    ]
    assert ids(facade.order_waiting(running, engine_at(6.0))) == ["high", "low-busy"]


# --- on the simulated engine ---------------------------------------------------------

TEN_MS = LinearCostModel(c0=0.01, c_prefill=0.0, c_decode=0.0, c_kv=0.0)


def starvation_run(policy: str | dict[str, Any]) -> RunResult:
    """One running slot; high-priority requests arrive twice as fast as it serves them."""
    high = [TraceRequest(f"high-{i}", i * 0.01, 16, 2) for i in range(100)]
    low = TraceRequest("low", 0.0, 16, 2, priority=1)
    config = SimConfig(num_blocks=64, max_num_seqs=1)
    facade = PolicyFacade.from_config(policy, strict=True)
    return SimEngine([low, *high], TEN_MS, config, facade).run()


def queue_s(run: RunResult, request_id: str) -> float:
    record = next(r for r in run.records if r.request_id == request_id)
    assert record.scheduled_s is not None
    return record.scheduled_s - record.arrival_s


def test_priority_starves_the_low_request_and_aging_bounds_its_wait() -> None:
    starved = starvation_run("priority")
    aged = starvation_run({"policy": NAME, "options": {NAME: {"aging_rate": 10.0}}})
    assert queue_s(starved, "low") > 1.5  # served once the high stream has drained
    # key 1 + 10 * 0.0 ties with high-10 (0 + 10 * 0.1): low goes after high-0..high-9
    assert queue_s(aged, "low") == pytest.approx(0.2, abs=0.03)
    for run in (starved, aged):
        assert all(r.finish_reason == "length" for r in run.records)


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -0.5, 1001, "fast", None])
def test_bad_aging_rate_names_the_field(bad: object) -> None:
    with pytest.raises(ValidationError, match="aging_rate"):
        PriorityAging.Options.model_validate({"aging_rate": bad})
    with pytest.raises(PolicyConfigError, match=f"{NAME}.*aging_rate"):
        PolicyFacade.from_config({"policy": NAME, "options": {NAME: {"aging_rate": bad}}})


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="aging\n"):
        PriorityAging.Options.model_validate({"aging": 1.0})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_fast_aging = conformance_test(NAME, {"aging_rate": 1000}, max_examples=100)


test_contract = contract_test(NAME)  # on every engine installed here
test_contract_fast_aging = contract_test(NAME, {NAME: {"aging_rate": 1000}})
