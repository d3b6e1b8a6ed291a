"""``benchmarks/gpu/disagg_ab.py`` (the GPU script of issue #42's aggregated-vs-
disaggregated A/B) cannot rot unseen: its simulated half runs here, and its dry run
lists the real deployments' commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "disagg_ab.py"


def _run(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", "Qwen2.5-7B", "--out", str(tmp_path), *args],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return proc.stdout, json.loads((tmp_path / "disagg-ab.json").read_text())


def test_the_simulated_half_runs_and_fills_its_rows(tmp_path: Path) -> None:
    _, report = _run(tmp_path, "--sim-only", "--num-prompts", "60")
    rows = {line.split(" | ")[0].strip("| "): line for line in str(report["table"]).splitlines()}
    assert "not run" in rows["real aggregated"] and "not run" in rows["real disaggregated"]
    for arm in ("sim aggregated", "sim disaggregated"):
        assert "not run" not in rows[arm] and rows[arm].count("|") == 8
    assert "%" in rows["sim: disaggregated vs aggregated"]
    (command,) = report["commands"]
    assert "--arm name=aggregated,policy=fcfs,tp=2" in command
    assert "prefill_replicas=1,decode_replicas=1,kv_link=nvlink4" in command


def test_the_dry_run_lists_both_deployments_and_runs_nothing(tmp_path: Path) -> None:
    out, report = _run(tmp_path, "--dry-run")
    commands: list[str] = report["commands"]
    assert len(commands) == 7 and out.count("$ ") == 7
    servers = [c for c in commands if " serve vllm " in c]
    assert len(servers) == 3 and "CUDA_VISIBLE_DEVICES=0,1" in servers[0]
    for gpu, server in enumerate(servers[1:]):
        assert f"CUDA_VISIBLE_DEVICES={gpu}" in server and "NixlConnector" in server
    assert any("schedkit.edge.pd" in c for c in commands)
    assert sum(" bench --engine openai " in c for c in commands) == 2
    assert not (tmp_path / "sim").exists()  # nothing ran
