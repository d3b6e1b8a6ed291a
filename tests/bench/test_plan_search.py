"""A plan's cheaper search (issue #40 item 2): probes stopped once their verdict is
decided, run in parallel across processes, on candidates prepared once; the plan's
decisions and every measured figure as the plain one-by-one search gives them."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bench_cli import schedkit

from schedkit.bench.engines.sim import simulate
from schedkit.bench.plan import PlanSpec, prepare, run_plan
from schedkit.bench.plan_probe import Stopped, run_probe
from schedkit.bench.plan_search import fewest_meeting, next_probe, probe_all
from schedkit.bench.runner import BenchSpec

# 300 requests at 40 req/s: one A100 falls far behind a 300 ms TTFT, five keep up
WORKLOAD = "poisson:rate=40,n=300,prompt=1024,output=64"
FIGURES = ("slo_attainment", "ttft_p90_ms", "tpot_p90_ms", "e2e_mean_ms", "throughput_tok_s")


def plan(jobs: int, early_stop: bool, **changes: Any) -> PlanSpec:
    bench = BenchSpec(workload=WORKLOAD, policies=["fcfs"], slo_ttft_ms=300.0, jobs=jobs)
    return PlanSpec(
        bench=bench, gpus=["H100-SXM", "A100-80GB"], tps=[1, 2],
        prices={"H100-SXM": 3.0, "A100-80GB": 2.0}, early_stop=early_stop, **changes,
    )  # fmt: skip


def _decisions(result: dict[str, Any]) -> list[Any]:
    """What a plan decided: each candidate's place, size, outcome and probes' verdicts."""
    return [
        (c["gpu"], c["tp"], c.get("replicas"), c["outcome"],
         [(p["replicas"], p["meets"]) for p in c["probes"]])
        for c in result["candidates"]
    ]  # fmt: skip


@pytest.fixture(scope="module")
def exact() -> dict[str, Any]:
    """The plain search: one probe after another, each run to its end."""
    return run_plan(plan(jobs=1, early_stop=False))


@pytest.mark.parametrize(("jobs", "early_stop"), [(1, True), (2, True), (2, False)])
def test_the_plans_decisions_and_figures_are_the_plain_searchs(
    exact: dict[str, Any], jobs: int, early_stop: bool
) -> None:
    result = run_plan(plan(jobs=jobs, early_stop=early_stop))
    assert _decisions(result) == _decisions(exact)
    assert result["best"] == exact["best"]  # the chosen: every figure, exactly
    stopped = 0
    for mine, plain in zip(result["candidates"], exact["candidates"], strict=True):
        assert mine.get("rule_of_thumb") == plain.get("rule_of_thumb")
        for p, q in zip(mine["probes"], plain["probes"], strict=True):
            if p["stopped_early"] is None:
                assert p == q  # run to its end: the same figures
                continue
            stopped += 1
            s = p["stopped_early"]  # a bound that holds what the full run measured
            assert s["slo_attainment_at_least"] <= q["slo_attainment"]
            assert q["slo_attainment"] <= s["slo_attainment_at_most"] < 0.9
            assert 0 < s["after_requests"] <= s["of_requests"] == 300
            assert all(p[k] is None for k in FIGURES) and not p["meets"]
    assert stopped == (6 if early_stop else 0)  # the overloaded probes, not the others


def test_a_probe_run_to_its_end_is_the_plain_replay_request_for_request() -> None:
    candidate = prepare(plan(jobs=1, early_stop=True))[2]  # A100-80GB tp=1
    d = candidate.deployment
    assert d is not None
    for replicas in (1, 3):
        watched = run_probe(d, replicas, 1e-6)  # watched; one request meeting: never stopped
        plain = simulate(d.requests, d.cost, d.sim_config, d.config, replicas)
        assert not isinstance(watched, Stopped)
        assert watched.records == plain.records
        assert (watched.steps, watched.duration_s) == (plain.steps, plain.duration_s)
    stopped = run_probe(d, 1, 0.9)
    assert isinstance(stopped, Stopped) and stopped.routed < stopped.requests


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.lists(st.booleans(), min_size=41, max_size=41))
def test_next_probe_asks_what_the_search_asks_in_its_order(
    max_replicas: int, verdicts: list[bool]
) -> None:
    """Any verdicts, monotone or not: replayed one probe at a time, the same probes in
    the same order and the same answer."""
    asked: list[int] = []

    def meets(n: int) -> bool:
        asked.append(n)
        return verdicts[n]

    answer = fewest_meeting(meets, max_replicas)
    known: dict[int, bool] = {}
    replayed = []
    while (n := next_probe(known, max_replicas)) is not None:
        replayed.append(n)
        known[n] = verdicts[n]
    assert replayed == list(dict.fromkeys(asked))
    assert fewest_meeting(known.__getitem__, max_replicas) == answer


def test_probes_run_ahead_are_kept_but_each_search_asks_what_it_would_alone() -> None:
    thresholds = [1, 5, 11, 64, 3]  # the fewest replicas meeting, per search (64: none)

    def probe(search: int, replicas: int) -> dict[str, Any]:
        return {"meets": replicas >= thresholds[search]}

    done: list[int] = []
    with ThreadPoolExecutor(3) as pool:
        ahead = probe_all(len(thresholds), 32, probe, pool, done.append, 3)
    alone = probe_all(len(thresholds), 32, probe, None, lambda i: None)
    assert sorted(done) == list(range(len(thresholds)))
    for mine, plain, threshold in zip(ahead, alone, thresholds, strict=True):
        assert plain.items() <= mine.items()  # every probe it asks for, and maybe more
        verdicts = {n: bool(p["meets"]) for n, p in mine.items()}
        assert fewest_meeting(verdicts.__getitem__, 32) == (threshold if threshold <= 32 else None)


def test_the_command_says_which_probes_stopped_early(tmp_path: Path) -> None:
    args = ["plan", "--workload", WORKLOAD, "--slo-ttft-ms", "300", "--gpu", "A100-80GB"]
    proc = schedkit(*args, "--out", str(tmp_path / "on"))
    assert proc.returncode == 0, proc.stderr
    assert "probes stopped early" in " ".join(proc.stdout.split())
    md = (tmp_path / "on" / "plan.md").read_text()
    assert "| < 90% | n/a | n/a | misses (stopped after " in md
    assert "--no-early-stop runs every probe to its end" in md
    html = (tmp_path / "on" / "plan.html").read_text()
    assert "A bar is a probe stopped early" in html and "stopped after" in html
    off = schedkit(*args, "--no-early-stop", "--out", str(tmp_path / "off"))
    assert off.returncode == 0, off.stderr
    result = json.loads((tmp_path / "off" / "plan.json").read_text())
    assert result["early_stop"] is False
    assert all(p["stopped_early"] is None for c in result["candidates"] for p in c["probes"])
    assert "stopped" not in (tmp_path / "off" / "plan.md").read_text()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--jobs", "0"], "greater than 0"),
        (["--attainment", "1.5"], "less than or equal to 1"),
        (["--max-replicas", "0"], "greater than or equal to 1"),
        (["--early-stop", "yes"], "Got unexpected extra argument"),
    ],
)
def test_bad_input_is_refused_before_any_probe(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    proc = schedkit(
        "plan", "--workload", WORKLOAD, "--slo-ttft-ms", "300", *flags,
        "--out", str(tmp_path / "bad"),
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert message in " ".join(proc.stderr.split())
    assert not (tmp_path / "bad").exists()
