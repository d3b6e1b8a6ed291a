"""The bench's --slo-* targets reach policies: requests without their own SLO get them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from schedkit import EngineView, Policy, PolicyFacade, RequestView, hookimpl
from schedkit.bench.engines.requests import request_metadata
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.records import RunResult

# r1 brings its own TTFT target, r2 its own TPOT target; r0 and r3 bring none.
ROWS: list[dict[str, Any]] = [
    {"request_id": "r0", "arrival_s": 0.0, "prompt_tokens": 300, "output_tokens": 8},
    {"request_id": "r1", "arrival_s": 0.1, "prompt_tokens": 300, "output_tokens": 8,
     "slo_ttft_ms": 250.0},
    {"request_id": "r2", "arrival_s": 0.2, "prompt_tokens": 300, "output_tokens": 8,
     "slo_tpot_ms": 5.0},
    {"request_id": "r3", "arrival_s": 0.3, "prompt_tokens": 300, "output_tokens": 8},
]  # fmt: skip


class SloSpy(Policy):
    """Records the SLO targets each arriving request shows a policy; decides nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[float | None, float | None]] = {}

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> None:
        self.seen[request.request_id] = (request.slo_ttft_ms, request.slo_tpot_ms)


@pytest.fixture
def trace(tmp_path: Path) -> str:
    path = tmp_path / "slos.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return str(path)


def run_spied(
    trace: str,
    monkeypatch: pytest.MonkeyPatch,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
) -> tuple[SloSpy, RunResult, Bench]:
    """One sim arm of the bench (``run_on_sim``, as ``schedkit bench`` runs it), spied on."""
    spy = SloSpy()
    monkeypatch.setattr(
        PolicyFacade, "from_config", classmethod(lambda cls, *a, **k: cls([("spy", spy)]))
    )
    spec = BenchSpec(
        workload=trace,
        policies=["fcfs"],
        kv_blocks=512,
        slo_ttft_ms=slo_ttft_ms,
        slo_tpot_ms=slo_tpot_ms,
    )
    bench = Bench(spec)
    return spy, bench.run_arm(0, 1.0), bench


def test_policies_see_the_bench_slos_where_requests_have_none(
    trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy, run, _ = run_spied(trace, monkeypatch, slo_ttft_ms=800.0, slo_tpot_ms=40.0)
    assert spy.seen == {
        "r0": (800.0, 40.0),
        "r1": (250.0, 40.0),  # its own TTFT target wins over the flag
        "r2": (800.0, 5.0),  # its own TPOT target wins over the flag
        "r3": (800.0, 40.0),
    }
    assert {r.request_id: (r.slo_ttft_ms, r.slo_tpot_ms) for r in run.records} == spy.seen


def test_without_flags_policies_see_only_the_requests_own_slos(
    trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy, _, _ = run_spied(trace, monkeypatch)
    assert spy.seen == {
        "r0": (None, None),
        "r1": (250.0, None),
        "r2": (None, 5.0),
        "r3": (None, None),
    }


def test_one_flag_fills_only_its_own_target(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spy, _, _ = run_spied(trace, monkeypatch, slo_tpot_ms=40.0)
    assert spy.seen["r0"] == (None, 40.0) and spy.seen["r1"] == (250.0, 40.0)


def test_real_engine_arms_send_the_filled_slos(trace: str) -> None:
    """vLLM and SGLang arms read a trace's SLOs through ``request_metadata``."""
    bench = Bench(BenchSpec(workload=trace, policies=["fcfs"], kv_blocks=512, slo_ttft_ms=800.0))
    for scale in (1.0, 2.0):  # a goodput search replays scaled copies
        meta = {t.request_id: request_metadata(t) for t in bench.workload(scale).requests}
        assert meta["r0"] == {"tenant": "default", "slo_ttft_ms": 800.0}
        assert meta["r1"] == {"tenant": "default", "slo_ttft_ms": 250.0}
        assert meta["r2"] == {"tenant": "default", "slo_ttft_ms": 800.0, "slo_tpot_ms": 5.0}


def test_goodput_judges_each_request_as_before(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Filling the flags into requests keeps what attainment means: a request's own target,
    else the flag's. The same records with the workload's own SLOs only score the same."""
    # Each request here takes ~7.5 ms to its first token and ~6 ms per later token: r0, r2
    # and r3 miss the flag's 5 ms TTFT; r1 meets its own 250 ms one.
    ttft, tpot = 5.0, 40.0
    _, run, _ = run_spied(trace, monkeypatch, slo_ttft_ms=ttft, slo_tpot_ms=tpot)
    own = {row["request_id"]: row for row in ROWS}
    unfilled = dataclasses.replace(
        run,
        records=[
            dataclasses.replace(
                r,
                slo_ttft_ms=own[r.request_id].get("slo_ttft_ms"),
                slo_tpot_ms=own[r.request_id].get("slo_tpot_ms"),
            )
            for r in run.records
        ],
    )
    filled = compute_metrics(run, slo_ttft_ms=ttft, slo_tpot_ms=tpot)
    before = compute_metrics(unfilled, slo_ttft_ms=ttft, slo_tpot_ms=tpot)
    assert filled["slo_met"] == 1
    assert (filled["slo_attainment"], filled["slo_met"]) == (
        before["slo_attainment"],
        before["slo_met"],
    )


def test_the_eviction_window_reaches_the_simulator(trace: str) -> None:
    from schedkit.sim.config import DEFAULT_EVICTION_WINDOW

    default = Bench(BenchSpec(workload=trace, policies=["fcfs"], kv_blocks=512))
    assert default.sim_config.eviction_window == DEFAULT_EVICTION_WINDOW
    unbounded = Bench(
        BenchSpec(workload=trace, policies=["fcfs"], kv_blocks=512, eviction_window=0)
    )
    assert unbounded.sim_config.eviction_window == 0
