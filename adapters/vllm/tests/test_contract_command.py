"""``schedkit contract`` with the vLLM adapter installed: a third-party package's
composition, with options, through every scenario on the simulator and on vLLM's
synchronous and async schedulers, from one command (#37)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schedkit.testing.contract import SCENARIOS

SITE = Path(__file__).resolve().parents[3] / "tests" / "data" / "contract_site"


def test_a_third_party_package_keeps_the_contract_on_every_vllm_scheduler() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", "ratio-demo+keep-priority",
         "--options", '{"ratio-demo": {"max_prompt_tokens": 300}}'],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(SITE), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(SCENARIOS)} scenarios on sim, vllm, vllm-async" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(SCENARIOS)
    for row in rows:  # scenario | sim | vllm | vllm-async
        assert row.count("kept") == 3, row
    assert "vllm-async: the AsyncScheduler schedules a step while the last one runs" in proc.stdout


def test_the_real_cpu_engine_runs_with_a_model(tiny_model: Path) -> None:
    """With --model, the real in-process vLLM CPU engine (it samples with the model and
    ends requests by its own output processing) schedules every step as the simulator,
    for a package whose victim policy reads needing and computed tokens."""
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", "ratio-demo+least-progress",
         "--options", '{"ratio-demo": {"max_prompt_tokens": 300}}',
         "--engine", "vllm-engine", "--model", str(tiny_model)],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(SITE), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(SCENARIOS)} scenarios on sim, vllm-engine" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(SCENARIOS)
    for row in rows:  # scenario | sim | vllm-engine
        assert row.count("kept") == 2 and "kept*" not in row, row


def test_a_bad_model_directory_is_refused_naming_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", "fcfs", "--model", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs --model PATH to a local model directory (with config.json)" in " ".join(
        proc.stderr.split()
    )
    assert "Traceback" not in proc.stderr
