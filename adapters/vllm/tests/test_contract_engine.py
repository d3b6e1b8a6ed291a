"""The contract suite on the real vLLM CPU engine (in-process, tiny random-weight Llama):
the engine schedules the identical batch at every step as the simulator and the
model-less scheduler, and its own output processing ends every request as the
contract says."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from schedkit import Policy, PolicyRegistry, RequestView, hookimpl
from schedkit.testing.contract import SCENARIOS, check_outcome, compare_outcomes, run_sim

from schedkit_vllm.harness.contract import run_vllm_engine

VOCAB = 512  # conftest's tiny_model
# Every scenario with the default policy, and every shipped policy on the scenario that
# exercises it (an engine start per run: ~5 s each).
CASES = [(s.name, "fcfs") for s in SCENARIOS] + [
    ("arrival-order", "priority"),
    ("arrival-order", "sjf"),
    ("arrival-order", "shortest-prompt"),
    ("arrival-order", "priority-aging"),
    ("kv-pressure", "lcf"),
    ("kv-pressure", "priority"),
    ("shared-prefix", "prefix-aware"),
    ("shared-prefix", "prefix-aware-queued"),
    ("shared-prefix", "lfu"),
    ("shared-prefix", "slru"),
    ("two-tenant", "vtc"),
    ("slo-mix", "slo"),
]


class ClockProbe(Policy):
    """Records what a policy sees of time: at each engine clock it orders the queue, the
    clock minus each waiting request's arrival."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.waits: dict[float, list[float]] = {}

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: Any) -> None:
        waits = sorted(round(engine.clock - r.arrival_time, 9) for r in waiting)
        self.waits[round(engine.clock, 9)] = waits


def test_policies_see_arrival_times_on_the_engine_clock_as_on_the_simulator(
    tiny_model: Path,
) -> None:
    # docs/hooks.md: arrival_time and engine.clock share a clock. The driver let vLLM
    # stamp arrivals with the wall clock (Unix time) while the view read the step clock,
    # so every wait came out near -1.7e9 s and an HRRN-like order saw no wait at all.
    scenario = next(s for s in SCENARIOS if s.name == "arrival-order")
    sim, real = ClockProbe(), ClockProbe()
    run_sim(scenario, [("probe", sim)])
    run_vllm_engine(scenario, [("probe", real)], tiny_model, vocab_size=VOCAB)
    seen = [w for waits in real.waits.values() for w in waits]
    assert seen and min(seen) >= 0 and 0 < max(seen) < 60
    # vLLM asks for the order only when a request can be admitted; at each such clock
    # the waits are the simulator's at the same clock
    assert {clock: sim.waits[clock] for clock in real.waits} == real.waits


def policies(name: str) -> list[Any]:
    return [(name, PolicyRegistry.discover().load(name)())]


@pytest.mark.parametrize(("scenario_name", "policy"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_real_engine_schedules_as_the_simulator(
    tiny_model: Path, scenario_name: str, policy: str
) -> None:
    scenario = next(s for s in SCENARIOS if s.name == scenario_name)
    engine = run_vllm_engine(scenario, policies(policy), tiny_model, vocab_size=VOCAB)
    check_outcome(scenario, engine)
    compare_outcomes(run_sim(scenario, policies(policy)), engine, scenario)
