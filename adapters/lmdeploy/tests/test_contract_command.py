"""``schedkit contract`` with the LMDeploy adapter installed: a third-party package's
compositions, with options, through every scenario on the simulator and on LMDeploy's
scheduler, from one command (#37). What the capability matrix lets differ on LMDeploy
(the order of prompts longer than the prefill budget, victims where LMDeploy shows the
hook another request needing room) is listed, not compared: the row reads kept*."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schedkit.testing.contract import SCENARIOS

SITE = Path(__file__).resolve().parents[3] / "tests" / "data" / "contract_site"
OPTIONS = ["--options", '{"ratio-demo": {"max_prompt_tokens": 300}}']


def contract(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(SITE), "COLUMNS": "250"},
    )


def rows(stdout: str) -> dict[str, list[str]]:
    """scenario -> its cells (sim, lmdeploy)."""
    cells = [line.strip("│ ").split("│") for line in stdout.splitlines() if line.startswith("│")]
    return {c[0].strip(): [x.strip() for x in c[1:]] for c in cells}


def test_a_third_party_package_keeps_the_contract_on_lmdeploy() -> None:
    for composition in ("ratio-demo+keep-priority", "ratio-demo+least-progress"):
        proc = contract(composition, *OPTIONS)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{len(SCENARIOS)} scenarios on sim, lmdeploy" in proc.stdout
        table = rows(proc.stdout)
        assert sorted(table) == sorted(s.name for s in SCENARIOS)
        for scenario, (sim, lmdeploy) in table.items():
            assert sim == "kept" and lmdeploy in ("kept", "kept*"), (scenario, proc.stdout)
        # warned once per engine, not at each of the ten engine starts
        assert proc.stdout.count("which lmdeploy honours only in part") == 1, proc.stdout
        assert "supports only in part" not in proc.stdout + proc.stderr


def test_what_lmdeploy_shows_the_victim_hook_is_named_where_it_differs() -> None:
    proc = contract("ratio-demo+least-progress", *OPTIONS, "--scenario", "victims")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows(proc.stdout)["victims"] == ["kept", "kept*"]
    flat = " ".join(proc.stdout.split())
    assert (
        "lmdeploy, victims: select_victims: victim call 0 not compared: needing v1 of"
        " v0,v1,v2,v3, sim needing v0 of v0,v1,v2,v3" in flat
    ), proc.stdout
