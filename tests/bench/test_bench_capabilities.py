"""The bench warns before a run when the engine honours a hook a selected policy uses
only in part, in the capability matrix's words, and records it in results.json."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from schedkit.bench import runner
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.capabilities import matrix_engine


def _spec(engine: str, policies: list[str]) -> BenchSpec:
    return BenchSpec(
        workload="poisson:rate=5,n=20,prompt=64,output=8", policies=policies, engine=engine
    )


def test_a_partly_supported_hook_is_warned_and_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Any engine name the matrix knows; the arms run on the simulator for the test.
    monkeypatch.setattr(runner, "load_engine", lambda name: runner.run_on_sim)
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        results = run_bench(_spec("sglang", ["fcfs", "slo", "slo+vtc"]), tmp_path)
    warnings = results["warnings"]  # slo's plan_batch, once per arm using it; none for fcfs
    assert [w.split("'")[1] for w in warnings] == ["slo", "slo+vtc"]
    for warning in warnings:
        assert "plan_batch" in warning and "sglang" in warning and "decode" in warning
        assert warning in caplog.text


def test_no_warning_where_every_hook_is_honoured(tmp_path: Path) -> None:
    results = run_bench(_spec("sim", ["slo", "lcf"]), tmp_path)
    assert results["warnings"] == []
    assert matrix_engine("vllm-twin") == "vllm"
