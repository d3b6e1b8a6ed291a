"""Built-in policies follow vLLM's semantics."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedkit import EngineState, PolicyFacade, RequestState, RequestView
from schedkit.plugins import BUILTINS, implemented_hooks
from schedkit.policies.builtin import FCFS, PriorityPolicy
from schedkit.testing.pytest_plugin import ContractCheck


def requests(*specs: tuple[int, float]) -> list[RequestState]:
    """Requests r0, r1, ... with the given (priority, arrival_time)."""
    return [
        RequestState(f"r{i}", num_prompt_tokens=64, max_tokens=8, priority=p, arrival_time=t)
        for i, (p, t) in enumerate(specs)
    ]


def ids(reqs: Sequence[RequestView] | None) -> list[str]:
    assert reqs is not None
    return [r.request_id for r in reqs]


def priority_facade() -> PolicyFacade:
    return PolicyFacade([("priority", PriorityPolicy())], strict=True)


# Reference implementations written the way vLLM's scheduler works: a heap keyed by
# (priority, arrival) for the waiting queue, and `max(running, key=(priority, arrival))`
# for each preemption victim.


def reference_waiting_order(waiting: list[RequestState]) -> list[RequestState]:
    left, order = list(waiting), []
    while left:
        best = min(left, key=lambda r: (r.priority, r.arrival_time))
        left.remove(best)
        order.append(best)
    return order


def reference_victims(running: list[RequestState]) -> list[RequestState]:
    """vLLM's max over (priority, arrival), repeated; exact ties go to the last admitted."""
    left, victims = list(running), []
    while left:
        victim = max(reversed(left), key=lambda r: (r.priority, r.arrival_time))
        left.remove(victim)
        victims.append(victim)
    return victims


def test_fcfs_implements_no_hooks() -> None:
    assert implemented_hooks(FCFS) == []
    facade = PolicyFacade([("fcfs", FCFS())])
    assert facade.implemented == frozenset()


def test_priority_implements_its_keys_only() -> None:
    assert implemented_hooks(PriorityPolicy) == ["waiting_key", "victim_key"]


def test_priority_orders_lower_value_first_then_earlier_arrival(engine: EngineState) -> None:
    waiting = requests((1, 0.0), (0, 3.0), (1, 1.0), (0, 2.0), (-1, 9.0))
    assert ids(priority_facade().order_waiting(waiting, engine)) == ["r4", "r3", "r1", "r0", "r2"]


def test_priority_victim_is_worst_priority_then_newest(engine: EngineState) -> None:
    running = requests((0, 0.0), (2, 1.0), (2, 5.0), (1, 9.0), (0, 4.0))
    victims = priority_facade().select_victims(running, running[0], engine)
    assert ids(victims) == ["r2", "r1", "r3", "r4", "r0"]


specs = st.lists(
    st.tuples(st.integers(-2, 2), st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0])), max_size=12
)


@given(specs)
def test_priority_waiting_order_matches_reference(pairs: list[tuple[int, float]]) -> None:
    engine = EngineState(kv_blocks_total=64, block_size=16)
    waiting = requests(*pairs)
    order = priority_facade().order_waiting(waiting, engine)
    if not waiting:
        assert order is None  # the hook is not called for an empty queue
        return
    assert order is not None
    assert [id(r) for r in order] == [id(r) for r in reference_waiting_order(waiting)]


@given(specs.filter(bool), st.data())
def test_priority_victims_match_reference(
    pairs: list[tuple[int, float]], data: st.DataObject
) -> None:
    engine = EngineState(kv_blocks_total=64, block_size=16)
    running = requests(*pairs)
    needing = data.draw(st.sampled_from(running))
    victims = priority_facade().select_victims(running, needing, engine)
    assert victims is not None
    assert [id(r) for r in victims] == [id(r) for r in reference_victims(running)]


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_keeps_the_contract(name: str, schedkit_contract: ContractCheck) -> None:
    """On every engine installed here (the simulator, in this environment)."""
    rows = schedkit_contract(name)
    assert {r.engine for r in rows} >= {"sim"} and all(r.ok for r in rows)
