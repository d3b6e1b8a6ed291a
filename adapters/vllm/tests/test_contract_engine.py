"""The contract suite on the real vLLM CPU engine (in-process, tiny random-weight Llama):
the engine schedules the identical batch at every step as the simulator and the
model-less scheduler, and its own output processing ends every request as the
contract says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from schedkit import PolicyRegistry
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
