"""The decode lane changes no decision: a run with it equals the run without it, step by
step and stretched, for every installed policy on settings that preempt, cut chunks,
bind the token budget, evict cached prefixes, hold prefill, or schedule as SGLang does."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import pytest

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.facade import PolicyFacade
from schedkit.plugins import PolicyRegistry
from schedkit.records import RunResult
from schedkit.sim.engine import SimEngine

SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # (bench spec, SimConfig changes)
    "demo": ({"workload": {"name": "azure-conv", "rate_scale": 4.0}, "max_requests": 500}, {}),
    "preempting": (
        {"workload": {"name": "azure-conv", "rate_scale": 4.0}, "max_requests": 400},
        {"num_blocks": 700},
    ),
    "shared-prefixes": (
        {"workload": "mooncake-conv", "max_requests": 250},
        {"num_blocks": 4000},
    ),
    "chunks": (
        {"workload": "poisson:rate=30,n=300,prompt=1500,output=80", "max_requests": 300},
        {"max_num_batched_tokens": 600, "long_prefill_token_threshold": 256, "num_blocks": 900},
    ),
    "sglang": (
        {"workload": {"name": "azure-conv", "rate_scale": 4.0}, "max_requests": 400},
        {"mixed_prefill": False, "num_blocks": 1500},
    ),
    "cadence": (
        {"workload": "mooncake-conv", "max_requests": 250},
        {"prefill_schedule_interval": 3, "cache_aware_admission_window": 8, "num_blocks": 3000},
    ),
    "concurrency": (
        {"workload": {"name": "azure-conv", "rate_scale": 4.0}, "max_requests": 300},
        {"max_concurrency": 24},
    ),
}
ROUTERS = {"least-loaded", "prefix-affinity", "round-robin"}


@cache
def _bench(scenario: str) -> Bench:
    spec, _ = SCENARIOS[scenario]
    return Bench(BenchSpec.model_validate({"policies": ["fcfs"], **spec}))


def _run(scenario: str, policy: str, *, lane: bool, stretch: bool) -> tuple[RunResult, SimEngine]:
    bench = _bench(scenario)
    config = bench.sim_config.model_copy(update=SCENARIOS[scenario][1])
    requests = bench.workload(bench.spec.workload.rate_scale).requests
    facade = PolicyFacade.from_config({"policy": [policy]})
    engine = SimEngine(requests, bench.cost, config, facade, stretch=stretch, lane=lane)
    return engine.run(), engine


def _comparable(result: RunResult, engine: SimEngine) -> tuple[Any, ...]:
    return (dataclasses.replace(result, wall_s=0.0), engine.kv.evictions, engine.step_index)


@pytest.mark.parametrize("stretch", [True, False], ids=["stretched", "stepped"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("policy", sorted(set(PolicyRegistry.discover().names()) - ROUTERS))
def test_lane_changes_no_decision(policy: str, scenario: str, stretch: bool) -> None:
    with_lane, engine = _run(scenario, policy, lane=True, stretch=stretch)
    without, reference = _run(scenario, policy, lane=False, stretch=stretch)
    assert _comparable(with_lane, engine) == _comparable(without, reference)
    if engine.lane_on:  # the lane ran (a policy observing steps keeps every request apart)
        assert engine.lane.steps > 0
        assert not reference.lane.steps
