"""A recorded set of bench runs gives the same results.json as when it was recorded.

The guard rail of a restructuring (issue #36): moving code must not change what a user's
run says. Each case runs ``schedkit bench`` as a user does (a subprocess) and compares its
results.json, without provenance and wall-clock timings, with the file recorded in
``tests/bench/golden/``. Floats are compared to 9 significant digits, so that a numpy
release's last-bit differences do not count. A deliberate change of results re-records
them: ``SCHEDKIT_RECORD_GOLDEN=1 .venv/bin/pytest tests/bench/test_results_unchanged.py``,
and the diff of the golden files is part of that change's review.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import bench

GOLDEN = Path(__file__).with_name("golden")
DATA = Path(__file__).resolve().parents[2] / "schedkit" / "data"
CASES: dict[str, list[str]] = {
    # the README's demo, on the first 600 requests
    "demo": ["--workload", "azure-conv", "--policy", "fcfs", "--policy", "shortest-prompt",
             "--rate-scale", "4", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100",
             "--max-requests", "600"],
    # a fairness run from a workload file, with a policy's options
    "flood": ["--workload", str(DATA / "two-tenant-flood.toml"), "--policy", "fcfs",
              "--policy", "vtc", "--max-requests", "400"],
    # engine-settings arms
    "settings": ["--workload", "poisson:rate=40,n=300,prompt=600,output=60", "--policy", "fcfs",
                 "--arm", "name=seqs8,max_num_seqs=8", "--arm", "name=seqs32,max_num_seqs=32"],
    # priorities and SLO classes
    "classes": ["--workload", str(DATA / "two-class.toml"), "--policy", "priority",
                "--policy", "slo", "--max-requests", "400", "--goodput",
                "--slo-ttft-ms", "1500", "--slo-tpot-ms", "80"],
}  # fmt: skip


def normalized(value: Any, key: str = "") -> Any:
    """``value`` without what differs run to run or machine to machine (provenance,
    wall-clock timings, where the checkout is)."""
    if isinstance(value, dict):
        return {
            k: normalized(v, k)
            for k, v in value.items()
            if k not in ("provenance", "wall_s") and not k.startswith("wall_")
        }
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, str):
        return value.replace(str(DATA), "<schedkit/data>")  # no path of this machine
    return value


@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_bench_runs_give_the_same_results(case: str, tmp_path: Path) -> None:
    results = normalized(bench(tmp_path / case, *CASES[case]))
    golden = GOLDEN / f"{case}.json"
    if os.environ.get("SCHEDKIT_RECORD_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(golden.read_text())
    assert results == recorded, f"{case}: results.json changed; see the module docstring"
