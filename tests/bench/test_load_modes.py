"""vllm bench serve's load modes on the simulator (issue #38 item 8): a closed loop
(``--max-concurrency``), every request at once (``--request-rate inf``), ``--num-prompts``,
``--percentile-metrics``/``--metric-percentiles``, the throughputs and ``--goodput`` as
vLLM spells them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_bench_cli import SMALL, schedkit
from test_results_schema import documented

from schedkit.bench.arms import resolve_arms
from schedkit.bench.runner import _check_load_modes
from schedkit.bench.spec import BenchSpec
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.records import RequestRecord
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model
from schedkit.sim.engine import SimEngine
from schedkit.workload import load_workload

BUSY = "poisson:rate=40,n=120,prompt=600,output=60"  # far more than 4 at once


def _replay(max_concurrency: int | None, workload: str = BUSY) -> list[RequestRecord]:
    requests = load_workload(workload).requests
    cost = RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"), 1)
    config = SimConfig(num_blocks=4000, max_concurrency=max_concurrency)
    engine = SimEngine(requests, cost, config, PolicyFacade.from_config(None))
    return engine.run().records


def _most_in_flight(records: list[RequestRecord]) -> int:
    """The most requests sent and not finished at any request's sending."""
    return max(
        sum(1 for q in records if q.arrival_s <= r.arrival_s < (q.finish_s or np.inf))
        for r in records
    )


@pytest.mark.parametrize("limit", [1, 4])
def test_max_concurrency_keeps_that_many_in_flight(limit: int) -> None:
    trace = load_workload(BUSY).requests
    open_loop = _replay(None)
    closed = _replay(limit)
    assert _most_in_flight(open_loop) > 4  # the trace alone would have more in flight
    assert _most_in_flight(closed) == limit
    assert all(r.finish_reason == "length" for r in closed)
    # a request is sent at its arrival or later, never before
    assert all(r.arrival_s >= t.arrival_s for r, t in zip(closed, trace, strict=True))
    if limit == 1:  # one at a time: each is sent when the one before finishes
        for before, after, t in zip(closed, closed[1:], trace[1:], strict=False):
            assert after.arrival_s == pytest.approx(max(before.finish_s or 0.0, t.arrival_s))


def test_a_limit_the_load_never_passes_changes_nothing() -> None:
    open_loop = _replay(None)
    most = _most_in_flight(open_loop)
    assert _replay(most) == open_loop
    assert _replay(most - 1) != open_loop


def _bench(out: Path, *args: str) -> tuple[dict[str, Any], str]:
    proc = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--policy", "shortest-prompt",
                    *args, "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "results.json").read_text()), " ".join(proc.stdout.split())


def _vllm_file(out: Path, index: int = 0) -> dict[str, Any]:
    (path,) = out.glob(f"vllm-bench-{index}-*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_closed_loop_all_at_once_from_the_command_line(tmp_path: Path) -> None:
    results, stdout = _bench(
        tmp_path / "out", "--request-rate", "inf", "--max-concurrency", "4", "--num-prompts", "50"
    )
    workload = results["workload"]
    assert workload["requests"] == 50 and workload["max_requests"] == 50
    assert workload["all_at_once"] is True and workload["max_concurrency"] == 4
    assert {"all_at_once", "max_concurrency"} <= documented()["workload"]
    assert "50 requests, all at 0 s, at most 4 in flight" in stdout
    vllm = _vllm_file(tmp_path / "out")
    assert vllm["request_rate"] == "inf" and vllm["max_concurrency"] == 4
    starts = sorted(vllm["start_times"])
    assert starts[:4] == [0.0] * 4 and starts[4] > 0.0  # four sent at once, the rest later
    for arm in results["arms"]:
        m = arm["metrics"]
        assert m["request_throughput_rps"] == pytest.approx(m["completed"] / m["duration_s"])
        assert m["total_token_throughput_tok_s"] == pytest.approx(
            (vllm["total_input_tokens"] + vllm["total_output_tokens"]) / m["duration_s"]
        )


def test_request_rate_inf_sends_every_request_at_0_s(tmp_path: Path) -> None:
    results, _ = _bench(tmp_path / "out", "--request-rate", "inf", "--num-prompts", "30")
    assert results["workload"]["all_at_once"] is True
    assert "max_concurrency" not in results["workload"]
    assert set(_vllm_file(tmp_path / "out")["start_times"]) == {0.0}


def test_percentiles_as_vllm_names_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    results, stdout = _bench(
        out, "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,95,99.9"
    )
    metrics = results["arms"][0]["metrics"]
    assert set(metrics["ttft_ms"]["percentiles"]) == {"p95", "p99.9"}
    assert set(metrics["e2e_ms"]["percentiles"]) == {"p95", "p99.9"}
    assert "percentiles" not in metrics["tpot_ms"] and "percentiles" not in metrics["itl_ms"]
    vllm = _vllm_file(out)
    ttfts = [t * 1000 for t, e in zip(vllm["ttfts"], vllm["errors"], strict=True) if not e]
    assert metrics["ttft_ms"]["percentiles"]["p99.9"] == pytest.approx(np.percentile(ttfts, 99.9))
    assert vllm["p99.9_ttft_ms"] == pytest.approx(np.percentile(ttfts, 99.9))
    assert "p95_e2el_ms" in vllm and "p95_tpot_ms" not in vllm
    for label in ("mean TTFT (ms)", "median TTFT (ms)", "P95 TTFT (ms)", "P99.9 E2EL (ms)"):
        assert label in stdout
    assert "TPOT (ms)" not in stdout  # not asked for
    report = (out / "report.md").read_text()
    assert "TTFT p99.9 (ms)" in report and "TTFT mean (ms)" in report


def test_default_summary_has_vllm_rows(tmp_path: Path) -> None:
    _, stdout = _bench(tmp_path / "out", "--max-requests", "60")
    for label in (
        "request throughput (req/s)", "output token throughput (tok/s)",
        "total token throughput (tok/s)", "mean TTFT (ms)", "P99 TPOT (ms)", "mean ITL (ms)",
    ):  # fmt: skip
        assert label in stdout
    assert "request goodput" not in stdout  # no SLO: no goodput to show


def test_goodput_as_vllm_spells_it(tmp_path: Path) -> None:
    results, stdout = _bench(tmp_path / "out", "--goodput", "ttft:500", "tpot:50",
                             "--max-requests", "80")  # fmt: skip
    assert results["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    for arm in results["arms"]:
        m = arm["metrics"]
        assert m["request_goodput_rps"] == pytest.approx(m["slo_met"] / m["duration_s"])
        assert "goodput_rps" not in m  # no rate search
    assert "request goodput (req/s)" in stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--goodput", "e2el:900"], "the keys are ttft and tpot"),
        (["--goodput", "ttft:fast"], "is not a positive number of milliseconds"),
        (["--goodput", "ttft:400", "--slo-ttft-ms", "500"], "set the same target"),
        (["--percentile-metrics", "ttfx"], "did you mean ttft?"),
        (["--metric-percentiles", "100"], "above 0 and below 100"),
        (["--request-rate", "inf,2"], "no point of a load sweep"),
        (["--request-rate", "inf", "--goodput"], "drop one of them"),
        (["--max-concurrency", "2", "--replicas", "2"], "one replica only"),
        (["--rate-scale", "inf"], "not a list of positive numbers"),
    ],
)
def test_bad_load_modes_are_refused(tmp_path: Path, args: list[str], words: str) -> None:
    out = tmp_path / "out"
    proc = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", *args, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr and not out.exists()


def test_max_concurrency_is_refused_where_no_engine_keeps_it() -> None:
    spec = BenchSpec(workload=SMALL, policies=["fcfs"], engine="vllm", max_concurrency=8)
    with pytest.raises(SchedkitError, match="kept by --engine sim and --engine openai"):
        _check_load_modes(spec, resolve_arms(spec.policies, spec.arms))


def test_a_sweep_keeps_and_states_the_limit(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--request-rate", "10,40",
                    "--max-concurrency", "4", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "arrivals: trace, at most 4 in flight;" in (out / "sweep.md").read_text()
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["provenance"]["spec"]["workload"]["max_concurrency"] == 4
