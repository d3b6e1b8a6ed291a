"""What a hook budget costs per hook call: none, soft (timed) and hard (on the policy's
thread), on cheap hooks where the facade's share shows most.

Run: ``taskset -c 0 pytest benchmarks/speed/bench_hook_budget.py --benchmark-only -q``

Each arm is printed against the no-budget baseline of its group at the end of the run
(``conftest.py``); no test asserts a time, the machine is shared. ``test_handoff`` compares
the hard budget's handoff with ``concurrent.futures`` doing the same job.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from schedkit._markers import hookimpl
from schedkit.decisions import ADMIT, Admission
from schedkit.facade import PolicyFacade
from schedkit.policy import Policy
from schedkit.policy_thread import PolicyThread
from schedkit.views import EngineState, EngineView, RequestState, RequestView

REQUESTS = 256
BUDGET_MS = 1_000.0  # never reached: the cost of the budget alone, not of a fault
ARMS = ["baseline", "soft", "hard"]

Record = Callable[[str, str, int], None]


class Cheap(Policy):
    """A key and an admission that cost next to nothing, so the budget's share shows."""

    @hookimpl
    def waiting_key(self, request: RequestView, engine: EngineView) -> tuple[int, float]:
        return (request.priority, request.arrival_time)

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return ADMIT if request.num_prompt_tokens < 1 << 20 else None


def facade_for(arm: str) -> PolicyFacade:
    if arm == "baseline":
        return PolicyFacade([("cheap", Cheap())])
    return PolicyFacade(
        [("cheap", Cheap())], hook_budget_ms=BUDGET_MS, hook_budget_hard=arm == "hard"
    )


def requests(n: int, seed: int = 0) -> list[RequestState]:
    rng = random.Random(seed)
    return [
        RequestState(f"r{i}", rng.randrange(1, 4000), 200, arrival_time=i * 0.1) for i in range(n)
    ]


@pytest.mark.parametrize("arm", ARMS)
def test_waiting_key(benchmark: Any, record: Record, arm: str) -> None:
    facade, waiting, view = facade_for(arm), requests(REQUESTS), EngineState(1000, 16)

    def key_all() -> list[Any]:
        return [facade.waiting_key(r, view) for r in waiting]

    benchmark.group = f"waiting_key x{REQUESTS}, per call"
    keys = benchmark(key_all)
    assert keys == [facade_for("baseline").waiting_key(r, view) for r in waiting]
    assert not facade.errors and not facade.slow_calls
    record(f"waiting_key x{REQUESTS}, per call", arm, REQUESTS)


@pytest.mark.parametrize("arm", ARMS)
def test_admit(benchmark: Any, record: Record, arm: str) -> None:
    facade, arrivals, view = facade_for(arm), requests(REQUESTS), EngineState(1000, 16)

    def admit_all() -> list[Admission]:
        return [facade.admit(r, view) for r in arrivals]

    benchmark.group = f"admit x{REQUESTS}, per call"
    assert benchmark(admit_all) == [ADMIT] * REQUESTS
    assert not facade.errors and not facade.slow_calls
    record(f"admit x{REQUESTS}, per call", arm, REQUESTS)


def nothing(x: int) -> int:
    return x


@pytest.mark.parametrize("arm", ["baseline", "policy-thread", "futures"])
def test_handoff(benchmark: Any, record: Record, arm: str) -> None:
    """One call of a function that does nothing: direct, through ``PolicyThread`` (a
    ``SimpleQueue`` and a lock per call), and through a one-thread ``ThreadPoolExecutor``
    waited with the same time-out."""
    budget_s = BUDGET_MS / 1000
    call: Callable[[int], Any]
    if arm == "policy-thread":
        thread = PolicyThread("bench", budget_s)

        def call(x: int) -> Any:
            return thread.call(nothing, x)

    elif arm == "futures":
        pool = ThreadPoolExecutor(max_workers=1)

        def call(x: int) -> Any:
            return pool.submit(nothing, x).result(timeout=budget_s)

    else:
        call = nothing

    def calls() -> int:
        return sum(call(i) for i in range(REQUESTS))

    benchmark.group = "handoff, per call"
    assert benchmark(calls) == REQUESTS * (REQUESTS - 1) // 2
    record("handoff, per call", arm, REQUESTS)
    if arm == "futures":
        pool.shutdown()
