"""What the policy facade costs an engine per scheduling step.

Run: ``taskset -c 0 pytest benchmarks/speed/bench_facade.py --benchmark-only -q``

Each arm is printed against the baseline of its group at the end of the run (see
``conftest.py``); no test asserts a time, the machine is shared.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from schedkit._markers import hookimpl
from schedkit.decisions import ADMIT, Admission, BatchBudget, StepReport
from schedkit.facade import PolicyFacade
from schedkit.policy import Policy
from schedkit.views import BlockState, EngineState, EngineView, RequestState, RequestView

STEPS = 1_000  # steps per timed call, so the timer's resolution does not matter
HOOKS_PER_STEP = 7
WAITING = 1_000

Record = Callable[[str, str, int], None]


# -- no hooks: the default FCFS config ----------------------------------------------------


def facade_steps(facade: PolicyFacade, n: int, req: RequestState, view: EngineState) -> Any:
    """``n`` steps of the calls an engine makes, each guarded as ``sim/engine.py`` does."""
    default = BatchBudget(8192, 256)
    waiting, running, blocks = [req], [req], [BlockState(1, 0)]
    report = StepReport(1, 0.01, 0, 1, running, [1])
    decision: Admission = ADMIT
    budget = default
    for _ in range(n):
        decision = facade.admit(req, view)
        budget = facade.plan_batch(view, default)
        if facade.has_order and waiting:
            facade.order_waiting(waiting, view)
        if facade.has_victims:
            facade.select_victims(running, req, view)
        if facade.has_evictions:
            facade.select_evictions(blocks, 1, view)
        if facade.has_step_observer:
            facade.step_finished(report, view)
        if facade.has_finish_observer:
            facade.request_finished(req, "length", view)
    return decision, budget


def baseline_steps(facade: PolicyFacade, n: int, req: RequestState, view: EngineState) -> Any:
    """The same loop and locals for an engine without policies: the defaults, taken inline."""
    default = BatchBudget(8192, 256)
    waiting, running, blocks = [req], [req], [BlockState(1, 0)]
    report = StepReport(1, 0.01, 0, 1, running, [1])
    decision: Admission = ADMIT
    budget = default
    for _ in range(n):
        decision = ADMIT
        budget = default
    return decision, budget, waiting, blocks, report


@pytest.mark.parametrize("arm", ["baseline", "facade"])
def test_step_no_hooks(benchmark: Any, record: Record, arm: str) -> None:
    facade = PolicyFacade.from_config("fcfs")
    assert not facade.implemented
    steps = facade_steps if arm == "facade" else baseline_steps
    benchmark.group = "fcfs: one step, per hook"
    benchmark(steps, facade, STEPS, RequestState("r", 100, 10), EngineState(1000, 16))
    record("fcfs step, per hook", arm, STEPS * HOOKS_PER_STEP)


# -- one ordering policy over a long waiting queue ----------------------------------------


class PriorityList(Policy):
    """``priority`` as a list hook, as the built-in policy was when RESULTS.md was recorded
    (it orders by key hooks since ``e9a9d31``, which ``bench_keys.py`` times): a tuple key."""

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=lambda r: (r.priority, r.arrival_time))


class ShortestPromptFirst(Policy):
    """Shortest prompt first: a cheap sort key, so the facade's share shows more."""

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=lambda r: r.num_prompt_tokens)


def waiting_queue(n: int, seed: int = 0) -> list[RequestState]:
    rng = random.Random(seed)
    return [
        RequestState(
            f"r{i}",
            max(1, round(rng.lognormvariate(6.5, 0.8))),
            200,
            arrival_time=i * 0.18,
            priority=rng.randrange(4),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("arm", ["baseline", "facade"])
@pytest.mark.parametrize("policy", ["priority", "spf"])
def test_order_waiting(benchmark: Any, record: Record, policy: str, arm: str) -> None:
    ordering = ShortestPromptFirst() if policy == "spf" else PriorityList()
    facade = PolicyFacade([(policy, ordering)])
    impl: Any = facade.policies[0][1]
    waiting, view = waiting_queue(WAITING), EngineState(1000, 16)
    call = facade.order_waiting if arm == "facade" else impl.order_waiting
    benchmark.group = f"{policy}: order_waiting over {WAITING} waiting"
    result = benchmark(call, waiting, view)
    assert result == impl.order_waiting(waiting, view)
    record(f"{policy} order_waiting x{WAITING}", arm, 1)
