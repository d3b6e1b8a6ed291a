"""Progress of the long commands on stderr, and what Ctrl-C says it kept (issue #38 item 5).

The commands run in a subprocess whose stderr is a pipe, so the display writes plain lines,
as in a CI log. A Ctrl-C test's child installs Python's SIGINT handler first: a child of a
background job inherits SIGINT ignored, and would never see the interrupt.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from test_bench_cli import schedkit

from schedkit.bench import progress
from schedkit.bench.engines import live
from schedkit.bench.engines.sim import simulate
from schedkit.bench.progress import Board, Snapshot, Tracker, reports, status, tracking
from schedkit.bench.runner import Bench, BenchSpec, run_bench
from schedkit.bench.sweep.run import INTERRUPTED_EXIT
from schedkit.testing.openai_stub import serve_stub

SMALL = "poisson:rate=10,n=50,prompt=200,output=20"
# ~1-3 s an arm here: long enough for a Ctrl-C sent after a line to land mid-arm
HEAVY = "poisson:rate=10,n=20000,prompt=600,output=60"
CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"


def test_a_bench_says_each_arm_done_on_stderr_off_a_terminal(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--policy", "sjf", "--jobs", "1",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "bench: 2 arms (fcfs, sjf), 50 requests each, one at a time"
    assert lines[1].startswith("bench: 1 of 2 arms done (fcfs) · 50% · ")
    assert re.search(r" elapsed · ETA \d+:\d\d$", lines[1]), lines[1]
    assert re.fullmatch(r"bench: 2 of 2 arms done \(fcfs, sjf\) · in \d+:\d\d", lines[2])
    assert len(lines) == 3  # sparse: no redraws in a log
    assert "bench:" not in proc.stdout  # the summary's stream stays clean


def test_a_sweep_says_its_probe_points_done(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--rate-scale", "0.5,1,2",
        "--jobs", "1", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "sweep: 3 probe points (1 arm x 3 rates x 1 replicate)"
    assert [line.split(" · ")[0] for line in lines[1:]] == [
        f"sweep: {k} of 3 probe points done" for k in (1, 2, 3)
    ]


def _interrupt_after(args: list[str], line: str, *, group: bool = False) -> tuple[int, str]:
    """Run ``schedkit ARGS``, send Ctrl-C once stderr shows ``line``; its status and
    stderr. ``group``: to the whole process group, as a terminal does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{CTRL_C}; from schedkit.cli import main; main()", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=group,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.stderr is not None
    seen = list(_lines_until(proc.stderr, line))
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, "".join(seen) + rest


def _lines_until(stream: IO[str], wanted: str) -> Iterator[str]:
    for text in stream:
        yield text
        if text.startswith(wanted):
            return
    raise AssertionError(f"the command ended before printing {wanted!r}")


def test_ctrl_c_on_a_bench_says_which_arms_were_done_and_that_nothing_was_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    args = ["bench", "--workload", HEAVY, "--policy", "fcfs", "--policy", "sjf", "--jobs", "1",
            "--out", str(out)]  # fmt: skip
    code, stderr = _interrupt_after(args, "bench: 1 of 2 arms done (fcfs)")
    assert code == INTERRUPTED_EXIT, stderr
    assert stderr.splitlines()[-1] == (
        f"error: interrupted after 1 of 2 arms (fcfs done); no results written to {out}"
    )
    assert "Traceback" not in stderr
    assert not out.exists()


def test_ctrl_c_at_a_terminal_stops_parallel_arms_with_one_line(tmp_path: Path) -> None:
    """The terminal sends SIGINT to the workers too: they leave it to the parent, which
    ends them and says nothing was done; the earlier results stay."""
    out = tmp_path / "out"
    first = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out))
    assert first.returncode == 0, first.stderr
    before = (out / "results.json").read_bytes()
    args = ["bench", "--workload", HEAVY, "--policy", "fcfs", "--policy", "sjf", "--jobs", "2",
            "--out", str(out), "--overwrite"]  # fmt: skip
    code, stderr = _interrupt_after(args, "bench: 2 arms", group=True)
    assert code == INTERRUPTED_EXIT, stderr
    assert stderr.splitlines()[-1] == (
        "error: interrupted before any of the 2 arms finished; no results written to"
        f" {out}; the earlier results there are untouched"
    )
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert (out / "results.json").read_bytes() == before


def test_the_simulator_reports_once_per_simulated_second_not_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = Bench(BenchSpec(workload=SMALL, policies=["fcfs"]))
    seen: list[tuple[float, float]] = []
    board = Board()
    monkeypatch.setattr(reports, "_board", board)
    monkeypatch.setattr(
        Board, "running", lambda self, slot, done, total, sent=-1: seen.append((done, total))
    )
    requests = bench.base.requests
    run = simulate(requests, bench.cost, bench.sim_config, bench.configs[0], 1)
    *running, ended = seen
    assert ended == (0, 0) and board.read().runs == 1  # the run ended: none running
    assert run.steps > 10 * len(running)  # a coarse grain
    assert len(running) <= math.ceil(run.duration_s) + 2  # the start, each simulated second
    done = [d for d, _ in running]
    assert done == sorted(done) and 0 < done[-1] < len(requests)  # requests done, rising
    assert {total for _, total in running} == {len(requests)}
    two = simulate(requests, bench.cost, bench.sim_config, bench.configs[0], 2)  # a cluster
    assert two.steps > 0 and board.read().runs == 2


def test_a_live_replay_reports_requests_sent_and_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = Board()
    seen: list[str] = []

    class Recording(progress.LiveProgress):
        def ended(self, count: int = 1) -> None:
            super().ended(count)
            seen.append(status(Tracker("bench", 1, "arms"), board.read(), 1.0, 0.5))

    monkeypatch.setattr(live, "live_replay", lambda total: Recording(board, total))
    with serve_stub("vllm") as stub:
        spec = BenchSpec(
            workload="poisson:rate=40,n=40,prompt=32,output=6", policies=["fcfs"],
            engine="openai", targets=[stub.url],
        )  # fmt: skip
        run_bench(spec, tmp_path / "out")
    assert len(seen) == 40
    assert re.search(r"sent (2\d|3\d|40), ended 20 of 40 requests", seen[19]), seen[19]
    assert "sent 40, ended 40 of 40 requests" in seen[-1]
    assert board.read().runs == 1 and board.read().total == 0  # closed with the arm


def test_status_lines_read_at_a_glance() -> None:
    tracker = Tracker("plan", 4, "candidates", runs_word="probes", fine=False)
    tracker.item_done()
    snap = Snapshot(running=2, done=500, total=4000, fraction=0.25, runs=9)
    share = progress.fraction(tracker, snap)
    assert share == 0.25  # a candidate's share is unknown: only those done count
    assert status(tracker, snap, 60.0, share) == (
        "plan: 1 of 4 candidates done, 9 probes run · running: 500 of 4,000 requests"
        " simulated · 25% · 1:00 elapsed · ETA 3:00"
    )
    assert progress.clock(3725) == "1:02:05"


def test_interrupted_names_what_was_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        pytest.raises(progress.Interrupted) as caught,
        tracking("bench", 3, "arms", kept="no results written to out") as track,
    ):
        track.item_done("fcfs")
        track.item_done("sjf")
        raise KeyboardInterrupt
    assert str(caught.value) == (
        "interrupted after 2 of 3 arms (fcfs, sjf done); no results written to out"
    )
    assert caught.value.exit_code == INTERRUPTED_EXIT
    with pytest.raises(KeyboardInterrupt), tracking("sweep", 3, "points", kept=None):
        raise KeyboardInterrupt  # the caller says what it kept


def test_results_are_the_same_with_progress_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = BenchSpec(workload=SMALL, policies=["fcfs", "sjf"], jobs=2)
    quiet = _without_provenance(run_bench(spec, tmp_path / "quiet").to_json())
    monkeypatch.setattr(progress, "_shown", True)
    shown = _without_provenance(run_bench(spec, tmp_path / "shown").to_json())
    assert "bench: 2 of 2 arms done" in capsys.readouterr().err
    assert json.dumps(shown, sort_keys=True) == json.dumps(quiet, sort_keys=True)


def _without_provenance(results: dict[str, Any]) -> dict[str, Any]:
    results.pop("provenance")
    for arm in results["arms"]:
        arm["metrics"].pop("wall_s", None)
    return results
