"""``schedkit contract`` with the SGLang adapter installed: a third-party package's
composition, with options, through every scenario on the simulator and on SGLang's
real engine (a tiny random-weight model the adapter builds), from one command (#37).

The command runs in a shell's environment, not this suite's: without the CPU settings
the conftest sets (``SGLANG_USE_CPU_ENGINE``, the CPU stand-ins on ``PYTHONPATH``,
``HF_HUB_OFFLINE``), which the adapter's ``contract_engines`` must make itself on a
CPU-only machine. One engine start per scenario: ~2 min here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schedkit.testing.contract import SCENARIOS

SITE = Path(__file__).resolve().parents[3] / "tests" / "data" / "contract_site"
CONFTEST_ENV = ("SGLANG_USE_CPU_ENGINE", "HF_HUB_OFFLINE", "PYTHONPATH")


def test_a_third_party_package_keeps_the_contract_on_sglang() -> None:
    env = {k: v for k, v in os.environ.items() if k not in CONFTEST_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", "ratio-demo+keep-priority",
         "--options", '{"ratio-demo": {"max_prompt_tokens": 300}}', "--engine", "sglang"],
        capture_output=True, text=True, timeout=900,
        env={**env, "PYTHONPATH": str(SITE), "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(SCENARIOS)} scenarios on sim, sglang\n" in proc.stdout, proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(SCENARIOS), proc.stdout
    for row in rows:  # scenario | sim | sglang
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1:] == ["kept", cells[2]] and cells[2] in ("kept", "kept*"), row
    assert "sglang: " in proc.stdout  # the note: what is not compared by design
