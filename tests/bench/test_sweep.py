"""Load sweeps: probe points, curves, knees, goodput, resuming, and the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import install_fake_plugin, schedkit

from schedkit.bench.arms import parse_arm
from schedkit.bench.runner import BenchSpec
from schedkit.bench.sweep.report import NO_SLO, goodput_figure, knee_figure
from schedkit.bench.sweep.run import INTERRUPTED_EXIT, POINTS_FILE, STOPPED_EXIT, run_sweep
from schedkit.bench.sweep.spec import Sweep, SweepSpec, crossing, goodput, knee
from schedkit.errors import SchedkitError

# 120 requests of 600 + 60 tokens; a few hundred blocks so that load shows.
WORKLOAD = "poisson:rate=10,n=120,prompt=600,output=60"


def spec(**changes: Any) -> SweepSpec:
    bench = BenchSpec(
        **{
            "workload": WORKLOAD,
            "policies": ["fcfs"],
            "arms": [parse_arm("name=seqs2,max_num_seqs=2")],
            "slo_ttft_ms": 1000.0,
            "jobs": 1,
            **changes.pop("bench", {}),
        }
    )
    options: dict[str, Any] = {"rate_scales": [0.5, 2.0, 8.0], "replicates": 3, **changes}
    return SweepSpec(bench=bench, **options)


def test_crossing_interpolates_between_the_probes_around_it() -> None:
    assert crossing([1, 2, 4], [10, 30, 50], 20, above=True) == pytest.approx(1.5)
    assert crossing([1, 2, 4], [10, 15, 18], 20, above=True) is None
    assert crossing([1, 2, 4], [1.0, 0.95, 0.5], 0.9, above=False) == pytest.approx(
        2 + 2 * 0.05 / 0.45
    )
    # the knee: 2x the level at the lowest rate
    assert knee([1, 2, 4, 8], [100, 120, 300, 900], 2.0) == pytest.approx(2 + 2 * 80 / 180)
    assert knee([1, 2], [100, None], 2.0) is None
    # goodput: which side of the range when it is not inside it
    assert goodput([1, 2], [0.5, 0.2], 0.9) == {"value": None, "censored": "below", "bound": 1}
    assert goodput([1, 2], [1.0, 0.95], 0.9) == {"value": None, "censored": "above", "bound": 2}


def test_a_sweep_keeps_every_probe_point_and_finds_each_arms_knee(tmp_path: Path) -> None:
    results = run_sweep(spec(), tmp_path)
    assert len(results["points"]) == 2 * 3 * 3  # arms x rates x replicates
    written = json.loads((tmp_path / "sweep.json").read_text())
    assert written["points"] == results["points"]
    fcfs, seqs2 = results["arms"]
    assert [a["arm"] for a in results["arms"]] == ["fcfs", "seqs2"]
    # offered load rises; so does p90 TTFT, and two sequences at a time break first
    p90 = [c["mean"] for c in seqs2["curves"]["ttft_p90_ms"]]
    assert p90[-1] > 2 * p90[0]
    assert seqs2["knee_rps"] is not None
    assert fcfs["knee_rps"] is None or fcfs["knee_rps"] > seqs2["knee_rps"]
    for arm in (fcfs, seqs2):  # trace windows: the range, never an unchecked interval
        for stat in arm["curves"]["ttft_p90_ms"]:
            assert stat["n"] == 3 and stat["ci"] is None
            assert stat["range"][0] <= stat["mean"] <= stat["range"][1]
        assert len(arm["goodput_by_replicate"]) == 3
    assert seqs2["goodput_by_replicate"] != fcfs["goodput_by_replicate"]
    html = (tmp_path / "sweep.html").read_text()
    assert html.count("<svg") == 5 and "seqs2" in html and "fcfs" in html
    md = (tmp_path / "sweep.md").read_text()
    assert "## seqs2" in md and "Knee:" in md and "Goodput:" in md


def test_one_knee_figure_with_its_interval(tmp_path: Path) -> None:
    results = run_sweep(spec(arrivals="poisson"), tmp_path)
    md = (tmp_path / "sweep.md").read_text()
    assert "(replicates:" not in md  # "Knee: 18.77 req/s (replicates: 18.56 (18.00 .. 19.11))"
    seqs2 = results["arms"][1]
    low, high = seqs2["knee"]["ci"]
    figure = f"{seqs2['knee']['mean']:.2f} req/s (95% interval {low:.2f} .. {high:.2f})"
    row = next(line for line in md.splitlines() if line.startswith("| seqs2 |"))
    knee_cell = row.split(" | ")[1]
    assert knee_cell == figure and knee_cell.count("req/s") == 1
    assert f"| seqs2 | {figure} |" in md  # the answer, at the top, before every table
    assert md.index(figure) < md.index("## fcfs")


def test_one_replicate_has_no_in_some_replicates_wording(tmp_path: Path) -> None:
    results = run_sweep(spec(replicates=1), tmp_path)
    texts = [goodput_figure(a)[1] for a in results["arms"]] + [
        knee_figure(a)[1] for a in results["arms"]
    ]
    md, html = (tmp_path / "sweep.md").read_text(), (tmp_path / "sweep.html").read_text()
    for text in [*texts, md, html]:
        assert "some replicates" not in text and "interval 9" not in text
    assert "Intervals: none with one replicate" in md
    # fcfs keeps SLO attainment up to the highest rate; seqs2 is under it at the lowest
    assert texts[0].startswith("above ") and "the highest rate probed" in texts[0]
    assert texts[1].startswith("below ") and "the lowest rate probed" in texts[1]


def test_a_knee_or_goodput_some_replicates_miss_is_a_bound() -> None:
    arm: dict[str, Any] = {
        "offered_rps": [10.0, 20.0, 30.0],
        "knee_by_replicate": [12.0, None, 21.0],
        "goodput_by_replicate": [
            {"value": 15.0, "censored": None, "bound": None},
            {"value": None, "censored": "above", "bound": 30.0},
            {"value": None, "censored": "above", "bound": 30.0},
        ],
    }
    x, text = knee_figure(arm)
    assert x == pytest.approx(21.0)  # (12 + 30 + 21) / 3: the mean is at least that
    assert text == (
        "at least 21.00 req/s (1 of 3 replicates reach none up to 30.00 req/s, the highest"
        " rate probed; no interval)"
    )
    x, text = goodput_figure(arm)
    assert x == pytest.approx(25.0) and text.startswith("at least 25.00 req/s (2 of 3 ")


def test_goodput_without_an_slo_says_why_not(tmp_path: Path) -> None:
    results = run_sweep(spec(replicates=1, bench={"slo_ttft_ms": None}), tmp_path)
    assert [goodput_figure(a) for a in results["arms"]] == [(None, NO_SLO)] * 2
    md, html = (tmp_path / "sweep.md").read_text(), (tmp_path / "sweep.html").read_text()
    assert f"Goodput: {NO_SLO}." in md and "SLO attainment" not in md
    assert "--slo-ttft-ms" in html and html.count("<svg") == 4  # no attainment chart


def test_sweep_html_has_the_table_the_knee_marker_and_the_slo_line(tmp_path: Path) -> None:
    results = run_sweep(spec(arrivals="poisson"), tmp_path)
    html = (tmp_path / "sweep.html").read_text()
    assert '<table id="knees">' in html and html.index('id="knees"') < html.index("<svg")
    for i, arm in enumerate(results["arms"]):  # every rate's table, as in sweep.md
        assert f'<table id="rates-{i}">' in html
        assert html.count("<tr>", html.index(f'id="rates-{i}"')) >= len(arm["offered_rps"])
    ttft = html[html.index('<figure id="ttft_p90_ms">') : html.index('<figure id="tpot_p90_ms">')]
    knee = results["arms"][1]["knee"]["mean"]
    assert f">knee seqs2 {knee:.1f}</text>" in ttft and 'class="ref"' in ttft
    assert ">TTFT SLO 1,000 ms</text>" in ttft and 'class="ref level"' in ttft
    attainment = html[html.index('<figure id="slo_attainment">') :]
    assert ">target 90%</text>" in attainment


def test_seeded_arrivals_get_the_checked_interval_and_attainment_its_range(tmp_path: Path) -> None:
    results = run_sweep(spec(arrivals="poisson"), tmp_path)
    for arm in results["arms"]:
        for stat in arm["curves"]["ttft_p90_ms"] + arm["curves"]["throughput_tok_s"]:
            assert stat["ci"][0] <= stat["mean"] <= stat["ci"][1] and "range" not in stat
        for stat in arm["curves"]["slo_attainment"]:
            assert stat["ci"] is None and stat["range"][1] <= 1.0
    assert "95% interval over replicates" in (tmp_path / "sweep.md").read_text()


def test_replicates_are_different_streams_and_reproducible() -> None:
    for arrivals in ("trace", "poisson"):
        sweep = Sweep(spec(arrivals=arrivals, bench={"max_requests": 40}))
        first = [sweep.requests(p) for p in sweep.points if p.arm == 0 and p.rate == 0]
        assert len({tuple(r.arrival_s for r in reqs) for reqs in first}) == 3
        # every arm replays the identical stream at one (rate, replicate): paired
        fcfs, seqs2 = (sweep.requests(p) for p in sweep.points[:2])
        assert sweep.points[0].arm != sweep.points[1].arm and fcfs == seqs2
        again = Sweep(spec(arrivals=arrivals, bench={"max_requests": 40}))
        assert [again.requests(p) for p in again.points] == [
            sweep.requests(p) for p in sweep.points
        ]
    trace = Sweep(spec(arrivals="trace", bench={"max_requests": 40}))
    ids = [{r.request_id for r in trace.streams[i]} for i in range(3)]
    assert not ids[0] & ids[1] and not ids[1] & ids[2]  # disjoint windows of the trace
    with pytest.raises(SchedkitError, match=r"--replicates 3 needs 3 windows of 50 requests"):
        Sweep(spec(arrivals="trace", bench={"max_requests": 50}))


def test_offered_rate_is_what_was_asked(tmp_path: Path) -> None:
    long = {"workload": "poisson:rate=10,n=900,prompt=600,output=60"}  # rate within ~3.3%
    sweep = Sweep(spec(rate_scales=[], request_rates=[3.0, 6.0], arrivals="poisson", bench=long))
    for point in sweep.points:
        reqs = sweep.requests(point)
        observed = len(reqs) / (reqs[-1].arrival_s - reqs[0].arrival_s)
        assert observed == pytest.approx(sweep.spec.rates[point.rate], rel=0.15)
    trace = Sweep(spec(rate_scales=[], request_rates=[3.0], bench={"max_requests": 40}))
    reqs = trace.requests(trace.points[0])
    assert len(reqs) / (reqs[-1].arrival_s - reqs[0].arrival_s) == pytest.approx(3.0)


def test_a_resumed_sweep_runs_only_the_missing_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = run_sweep(spec(), tmp_path / "full")
    lines = (tmp_path / "full" / POINTS_FILE).read_text().splitlines()
    part = tmp_path / "part"
    part.mkdir()
    (part / POINTS_FILE).write_text("\n".join(lines[:8]) + '\n{"key": "trunc')  # cut mid-line
    seen: list[tuple[int, int, int, int]] = []
    ran: list[str] = []
    original = Sweep.run

    def counted(self: Sweep, point: Any) -> dict[str, Any]:
        ran.append(point.key)
        return original(self, point)

    monkeypatch.setattr(Sweep, "run", counted)
    resumed = run_sweep(spec(), part, lambda *args: seen.append(args))
    assert len(ran) == 18 - 7  # the header line and 7 points were kept
    assert seen[0] == (7, 18, 0, 2) and seen[-1] == (18, 18, 2, 2)  # points, then arms
    assert resumed["points"] == full["points"]
    assert resumed["arms"] == full["arms"]
    with pytest.raises(SchedkitError, match="holds the probe points of another sweep"):
        run_sweep(spec(knee_factor=3.0), part)


def test_bad_sweeps_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        spec(request_rates=[1.0])
    with pytest.raises(ValueError, match="given twice"):
        spec(rate_scales=[1.0, 1.0])
    with pytest.raises(ValueError, match="runs on --engine sim"):
        spec(bench={"engine": "vllm"})


def test_the_command_sweeps_and_an_interrupted_sweep_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [
        "bench", "--workload", "poisson:rate=10,n=6000,prompt=600,output=60", "--policy", "fcfs",
        "--rate-scale", "0.5,1,2,4,8,16", "--replicates", "4", "--jobs", "1", "--out", str(out),
    ]  # fmt: skip
    # Ctrl-C as at a terminal: a child of a background job inherits SIGINT ignored (as
    # when CI runs in the background), and the sweep would never see the interrupt
    ctrl_c = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{ctrl_c}; from schedkit.cli import main; main()", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    points = out / POINTS_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
        not points.exists() or len(points.read_text().splitlines()) < 2
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    kept = len(points.read_text().splitlines()) - 1
    assert proc.returncode == INTERRUPTED_EXIT, stderr
    assert f"{kept} of 24 probe points are kept" in " ".join(stderr.split())
    assert "Run the same command again" in stderr and "Traceback" not in stderr
    again = schedkit(*args)
    assert again.returncode == 0, again.stderr
    assert "knee" in again.stdout
    assert f"goodput: {NO_SLO}" not in again.stdout and NO_SLO in again.stdout  # not a "-"
    results = json.loads((out / "sweep.json").read_text())
    assert len(results["points"]) == 24


def test_bad_rates_on_the_command_line(tmp_path: Path) -> None:
    for flags, message in (
        (["--rate-scale", "0,1"], "--rate-scale '0,1' is not a list of positive numbers"),
        (["--rate-scale", "1,2", "--request-rate", "3"], "not both"),
        (
            ["--rate-scale", "1,2", "--arrivals", "uniform"],
            "--arrivals: 'uniform' is not accepted; it takes 'trace' or 'poisson'",
        ),
    ):
        proc = schedkit(
            "bench", "--workload", WORKLOAD, "--policy", "fcfs", *flags, "--out", str(tmp_path)
        )
        assert proc.returncode == 2, proc.stderr
        assert message in " ".join(proc.stderr.split()), proc.stderr


def test_one_request_rate_is_one_bench_at_that_rate(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", WORKLOAD, "--policy", "fcfs", "--request-rate", "5",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["workload"]["rate_scale"] == pytest.approx(5 / 10, rel=0.2)
    assert results["workload"]["rate_rps"] == pytest.approx(5.0)


def test_a_sweep_on_ray_gives_the_local_pools_points(tmp_path: Path) -> None:
    """On a real local Ray instance (two CPUs): the same probe points, record for record."""
    import ray  # in schedkit's test extra: a missing one fails here, loudly

    assert not ray.is_initialized()
    local = run_sweep(spec(arrivals="poisson"), tmp_path / "local")
    on_ray = run_sweep(spec(arrivals="poisson", ray="local"), tmp_path / "ray")
    assert on_ray["points"] == local["points"]
    assert on_ray["arms"] == local["arms"]


CRASHY = """
import os
from schedkit import Policy, hookimpl

class Plugin(Policy):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.early = 0

    @hookimpl
    def on_request_arrived(self, request, engine):
        self.early += request.arrival_time < 1.0
        if self.early > 30:  # only at the highest rate: the worker process dies
            os._exit(3)
"""


def test_a_lost_worker_stops_the_sweep_and_keeps_the_finished_points(tmp_path: Path) -> None:
    env = install_fake_plugin(tmp_path / "site", "crashy", "crashy_policy", CRASHY)
    out = tmp_path / "out"
    proc = schedkit(
        "bench", "--workload", WORKLOAD, "--policy", "crashy", "--rate-scale", "0.5,1,8",
        "--replicates", "2", "--jobs", "2", "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == STOPPED_EXIT, proc.stderr
    text = " ".join(proc.stderr.split())
    assert "the sweep was stopped (" in text and "of 6 probe points are kept" in text
    assert "crashy@8#" in text and "Traceback" not in text
    kept = [json.loads(line) for line in (out / POINTS_FILE).read_text().splitlines()[1:]]
    assert all(p["rate"] < 8 for p in kept)
    assert not (out / "sweep.json").exists()
