"""Results are never replaced silently (issue #38 item 6): a bench or sweep whose ``--out``
holds another run's results refuses, naming what is there and the fix, and writes nothing;
``--overwrite`` replaces them, and the folder then holds one run's results."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_bench_cli import schedkit

from schedkit.bench.output import check_replacing, earlier_results
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.errors import SchedkitError

SMALL = "poisson:rate=10,n=50,prompt=200,output=20"
OTHER = "poisson:rate=10,n=30,prompt=100,output=10"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _refusal(proc_stderr: str, returncode: int) -> str:
    """The one paragraph of a refusal: exit status 2, no traceback, no progress line."""
    assert returncode == 2, proc_stderr
    assert "Traceback" not in proc_stderr
    lines = [line for line in proc_stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc_stderr
    return lines[0].removeprefix("error: ")


def test_a_bench_onto_another_runs_results_refuses_and_overwrite_replaces(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    first = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out))
    assert first.returncode == 0, first.stderr
    before = _files(out)
    again = schedkit("bench", "--workload", OTHER, "--policy", "sjf", "--out", str(out))
    message = _refusal(again.stderr, again.returncode)
    assert re.fullmatch(
        rf"--out '{re.escape(str(out))}' holds a bench's results \(results\.json, written"
        r" \d{4}-\d\d-\d\d \d\d:\d\d UTC by `schedkit bench --workload"
        rf" {re.escape(SMALL)} --policy fcfs --out {re.escape(str(out))}`\); pass"
        r" --overwrite to replace them, or another --out for this run",
        message,
    ), message
    assert _files(out) == before  # nothing written
    replaced = schedkit(
        "bench", "--workload", OTHER, "--policy", "sjf", "--out", str(out), "--overwrite"
    )
    assert replaced.returncode == 0, replaced.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["workload"]["requests"] == 30 and results["arms"][0]["policy"] == "sjf"
    assert sorted(p.name for p in out.glob("vllm-bench-*.json")) == ["vllm-bench-0-sjf.json"]


def test_a_fresh_folder_or_one_without_results_takes_a_bench(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "README.txt").write_text("my notes")
    proc = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "README.txt").read_text() == "my notes"
    fresh = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(tmp_path / "fresh")
    )
    assert fresh.returncode == 0, fresh.stderr


def test_a_sweep_and_a_bench_do_not_replace_each_other_silently(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sweep = ["bench", "--workload", SMALL, "--policy", "fcfs", "--rate-scale", "1,2",
             "--out", str(out)]  # fmt: skip
    assert schedkit(*sweep).returncode == 0
    before = _files(out)
    bench = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out))
    message = _refusal(bench.stderr, bench.returncode)
    assert "holds a sweep's results (sweep.json, written " in message, message
    assert message.endswith("), and points.jsonl; pass --overwrite to replace them, or"
                            " another --out for this run")  # fmt: skip
    assert _files(out) == before
    rerun = schedkit(*sweep)  # the same sweep again: its points are kept, not refused
    assert rerun.returncode == 0, rerun.stderr
    replaced = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out), "--overwrite"
    )
    assert replaced.returncode == 0, replaced.stderr
    assert not {"sweep.json", "points.jsonl", "sweep.md", "sweep.html"} & set(_files(out))
    back = schedkit(*sweep)
    assert "holds a bench's results (results.json" in _refusal(back.stderr, back.returncode)
    assert schedkit(*sweep, "--overwrite").returncode == 0
    assert not {"results.json", "report.md", "report.html"} & set(_files(out))
    assert not list(out.glob("vllm-bench-*.json"))


def test_another_sweeps_points_are_refused_or_started_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sweep = ["bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out)]
    assert schedkit(*sweep, "--rate-scale", "1,2").returncode == 0
    other = schedkit(*sweep, "--rate-scale", "1,3")
    message = _refusal(other.stderr, other.returncode)
    assert message.startswith(
        f"--out '{out}' holds the probe points of another sweep (2 kept in points.jsonl, written "
    ), message
    assert message.endswith(
        ": other arms, rates, replicates or settings); pass --overwrite to start this sweep"
        " over there, or another --out"
    ), message
    started_over = schedkit(*sweep, "--rate-scale", "1,3", "--overwrite")
    assert started_over.returncode == 0, started_over.stderr
    rates = {p["rate"] for p in json.loads((out / "sweep.json").read_text())["points"]}
    assert rates == {1.0, 3.0}


def test_the_library_refuses_too(tmp_path: Path) -> None:
    spec = BenchSpec(workload=SMALL, policies=["fcfs"])
    run_bench(spec, tmp_path)
    with pytest.raises(SchedkitError, match="holds a bench's results"):
        run_bench(spec, tmp_path)
    run_bench(spec, tmp_path, overwrite=True)
    check_replacing(tmp_path / "missing", overwrite=False)  # a folder yet to be made
    (tmp_path / "plan.json").write_text("{}")
    found = earlier_results(tmp_path)
    assert found is not None and found.endswith("), and plan.json")
