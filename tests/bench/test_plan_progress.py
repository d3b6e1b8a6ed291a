"""``schedkit plan``'s progress and its protected ``--out`` (issue #38 items 5 and 6): the
plan's search reports each candidate done and the probes run (``schedkit.bench.progress``),
and a plan onto another run's results refuses unless ``--overwrite``."""

from __future__ import annotations

import re
from pathlib import Path

from test_bench_cli import schedkit

SMALL = "poisson:rate=40,n=200,prompt=400,output=40"
PLAN = ["plan", "--workload", SMALL, "--gpu", "H100-SXM,A100-80GB", "--slo-ttft-ms", "500",
        "--max-replicas", "4", "--jobs", "1"]  # fmt: skip


def test_a_plan_says_each_candidate_done_and_the_probes_run(tmp_path: Path) -> None:
    proc = schedkit(*PLAN, "--out", str(tmp_path / "plan"))
    assert proc.returncode in (0, 4), proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "plan: 2 candidates"
    assert re.match(r"plan: 1 of 2 candidates done, \d+ probes run · 50% · ", lines[1]), lines
    assert re.fullmatch(r"plan: 2 of 2 candidates done, \d+ probes run · in \d+:\d\d", lines[2])


def test_a_plan_onto_another_runs_results_refuses_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    bench = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out))
    assert bench.returncode == 0, bench.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = schedkit(*PLAN, "--out", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: --out '{out}' holds a bench's results (results.json")
    assert "pass --overwrite to replace them, or another --out" in " ".join(proc.stderr.split())
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing searched
    replaced = schedkit(*PLAN, "--out", str(out), "--overwrite")
    assert replaced.returncode in (0, 4), replaced.stderr
    assert (out / "plan.json").is_file()
