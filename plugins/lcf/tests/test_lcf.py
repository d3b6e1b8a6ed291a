"""lcf: installed, selectable only by config, least computed first, conforming."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError
from schedkit import EngineState, PolicyFacade, PolicyRegistry, RequestState, load_config
from schedkit.plugins import implemented_hooks
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.sim.request import SimRequest
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_lcf import LeastComputedFirst

NAME = "lcf"


def request(request_id: str, computed: int, *, priority: int = 0) -> RequestState:
    state = RequestState(request_id, 4096, max_tokens=512, priority=priority)
    state.num_computed_tokens = computed
    return state


def engine() -> EngineState:
    return EngineState(kv_blocks_total=64, block_size=16)


def ids(requests: Sequence[Any] | None) -> list[str]:
    assert requests is not None
    return [r.request_id for r in requests]


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-lcf"
    assert entry.target == "schedkit_lcf:LeastComputedFirst"
    assert entry.load() is LeastComputedFirst


def test_selectable_by_config_not_by_default() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.implemented == {"select_victims"}
    assert facade.has_victims and not facade.has_order
    assert NAME not in load_config(None).policy


def test_cli_lists_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    entry = next(e for e in json.loads(result.stdout) if e["name"] == NAME)
    assert entry["distribution"] == "schedkit-lcf"
    assert entry["hooks"] == implemented_hooks(LeastComputedFirst) == ["select_victims"]


# --- behaviour ----------------------------------------------------------------------


def test_least_computed_first_ties_newest_first() -> None:
    running = [
        request("oldest-big", 3000),
        request("small", 40),
        request("mid", 700),
        request("small-newer", 40),
        request("newest-big", 2000),
    ]
    victims = LeastComputedFirst().select_victims(running, running[2], engine())
    assert ids(victims) == ["small-newer", "small", "mid", "newest-big", "oldest-big"]
    assert ids(running) == ["oldest-big", "small", "mid", "small-newer", "newest-big"]


def test_needing_is_a_candidate_like_any_other() -> None:
    running = [request("busy", 5000), request("needing", 16)]
    victims = LeastComputedFirst().select_victims(running, running[1], engine())
    assert ids(victims) == ["needing", "busy"]


def test_composed_first_it_overrides_the_priority_victim() -> None:
    running = [request("high-busy", 4000, priority=0), request("low-fresh", 16, priority=1)]
    running.append(request("low-busy", 3000, priority=1))
    by_priority = PolicyFacade.from_config("priority").select_victims(running, running[0], engine())
    assert ids(by_priority)[0] == "low-busy"
    facade = PolicyFacade.from_config("lcf+priority", strict=True)
    assert ids(facade.select_victims(running, running[0], engine())) == [
        "low-fresh",
        "low-busy",
        "high-busy",
    ]
    assert facade.has_order  # the waiting order still comes from priority


# --- on the simulated engine ---------------------------------------------------------

TEN_MS = LinearCostModel(c0=0.01, c_prefill=0.0, c_decode=0.0, c_kv=0.0)


def kv_pressure_run(policy: str) -> tuple[RunResult, list[tuple[str, int]]]:
    """A long-decoding request admitted first, a long prompt admitted last, too few blocks.

    ``small`` decodes from t=0; ``big`` (800-token prompt) is admitted at t=0.05 and is
    the last admitted when the 80 blocks (1280 tokens) run out, so FCFS preempts it and
    throws away its prompt, while ``small`` has computed only a few hundred tokens.
    """
    requests = [
        TraceRequest("small", 0.0, 16, 600),
        TraceRequest("big", 0.05, 800, 300),
    ]
    config = SimConfig(num_blocks=80, enable_prefix_caching=False)
    facade = PolicyFacade.from_config(policy, strict=True)
    engine = SimEngine(requests, TEN_MS, config, facade, check_invariants=True)
    lost: list[tuple[str, int]] = []
    preempt = engine._preempt

    def noting(req: SimRequest) -> None:
        lost.append((req.request_id, req.num_computed_tokens))
        preempt(req)

    engine._preempt = noting  # type: ignore[method-assign]
    return engine.run(), lost


def test_preempts_the_request_that_loses_least_and_recomputes_less() -> None:
    fcfs, fcfs_lost = kv_pressure_run("fcfs")
    lcf, lcf_lost = kv_pressure_run(NAME)
    assert fcfs_lost[0][0] == "big" and fcfs_lost[0][1] >= 800
    assert lcf_lost[0][0] == "small" and lcf_lost[0][1] < fcfs_lost[0][1]
    # 245 tokens recomputed instead of 1024 (no prefix cache to recover them from)
    assert 0 < lcf.recomputed_tokens < 0.3 * fcfs.recomputed_tokens
    for run in (fcfs, lcf):
        assert [r.finish_reason for r in run.records] == ["length", "length"]
        assert run.policy_errors == 0


# --- options ------------------------------------------------------------------------


def test_takes_no_options() -> None:
    with pytest.raises(ValidationError, match="victims\n"):
        LeastComputedFirst.Options.model_validate({"victims": 3})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=150)


test_contract = contract_test(NAME)  # on every engine installed here
