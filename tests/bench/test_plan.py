"""``schedkit plan``: the fewest replicas per candidate, the cheapest candidate, the rule
of thumb, and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import schedkit

from schedkit.bench.arms import EngineSettings
from schedkit.bench.plan import PlanSpec, rule_of_thumb, run_plan
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.sim.cost.profiles import get_gpu, get_model

# 300 requests at 40 req/s: more than one A100 serves within a 300 ms TTFT
WORKLOAD = "poisson:rate=40,n=300,prompt=1024,output=64"


def plan(**changes: Any) -> PlanSpec:
    bench = BenchSpec(workload=WORKLOAD, policies=["fcfs"], slo_ttft_ms=300.0, jobs=1)
    return PlanSpec(bench=bench, **{"gpus": ["H100-SXM", "A100-80GB"], **changes})


def test_each_candidate_gets_the_fewest_replicas_meeting_the_target() -> None:
    result = run_plan(plan(max_replicas=16))
    for c in result["candidates"]:
        met = {p["replicas"]: p["slo_attainment"] >= 0.9 for p in c["probes"]}
        assert met[c["replicas"]]
        assert all(not ok for n, ok in met.items() if n < c["replicas"])
        if c["replicas"] > 1:  # the search saw the count just below miss
            assert met.get(c["replicas"] - 1) is False
    h100, a100 = result["candidates"]
    assert h100["replicas"] <= a100["replicas"]
    assert a100["replicas"] > 1  # one A100 does not keep up: the plan had to search
    assert result["ranked_by"] == "GPU count" and result["best"]["gpu"] == "H100-SXM"


def test_prices_decide_the_cheapest() -> None:
    cheap_a100 = run_plan(plan(prices={"H100-SXM": 100.0, "A100-80GB": 0.01}))
    best = cheap_a100["best"]
    assert cheap_a100["ranked_by"] == "cost per hour" and best["gpu"] == "A100-80GB"
    assert best["cost_per_hour"] == pytest.approx(best["gpus"] * 0.01)


def test_a_candidate_that_does_not_fit_is_reported_and_the_others_planned() -> None:
    bench = BenchSpec(
        workload=WORKLOAD, policies=["fcfs"], model="Llama-3-70B", slo_ttft_ms=2000.0, jobs=1
    )
    result = run_plan(PlanSpec(bench=bench, gpus=["H100-SXM"], tps=[1, 4], max_replicas=4))
    one, four = result["candidates"]
    assert "needs ~" in one["error"] and "weights" in one["error"] and not one["probes"]
    assert four.get("replicas") is not None or "misses the target" in four["error"]


def test_engine_setting_variants_are_candidates() -> None:
    variants = [EngineSettings(max_num_seqs=2), EngineSettings(max_num_seqs=256)]
    result = run_plan(plan(gpus=["H100-SXM"], settings=variants, max_replicas=32))
    two, many = result["candidates"]
    assert two["settings"] == {"max_num_seqs": 2} and two["replicas"] > many["replicas"]


def test_the_rule_of_thumb_is_the_seeds_formula() -> None:
    bench = Bench(BenchSpec(workload=WORKLOAD, policies=["fcfs"]))
    model, gpu = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    thumb = rule_of_thumb(bench, "H100-SXM", 1, 0.9)
    reqs = bench.base.requests
    tokens = sum(r.prompt_tokens + r.output_tokens for r in reqs) / len(reqs)
    expected = (gpu.mem_gb * 1e9 * 0.9 - model.weight_bytes - 1e9) / (
        model.kv_bytes_per_token * tokens
    )  # (memory - weights - reserve) / (KV bytes per token x tokens per request)
    assert thumb["tokens_per_request"] == pytest.approx(tokens)
    assert thumb["concurrency_per_gpu"] == pytest.approx(expected)
    assert 100 < expected < 1000  # about 310 for Llama-3-8B on an H100


def test_bad_plans_are_refused() -> None:
    bench = BenchSpec(workload=WORKLOAD, policies=["fcfs"])
    with pytest.raises(ValueError, match="a plan needs an SLO"):
        PlanSpec(bench=bench, gpus=["H100-SXM"])
    with pytest.raises(ValueError, match="price every candidate GPU"):
        plan(prices={"H100-SXM": 3.0})
    with pytest.raises(ValueError, match="must be a positive number"):
        plan(prices={"H100-SXM": 3.0, "A100-80GB": -1.0})


def test_the_command(tmp_path: Path) -> None:
    args = ["plan", "--workload", WORKLOAD, "--slo-ttft-ms", "300", "--gpu", "H100-SXM,A100-80GB"]
    proc = schedkit(
        *args, "--price", "H100-SXM=3", "--price", "A100-80GB=2", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    assert "cheapest (cost per hour):" in proc.stdout
    result = json.loads((tmp_path / "plan.json").read_text())
    assert result["best"]["cost_per_hour"] > 0
    md, html = (tmp_path / "plan.md").read_text(), (tmp_path / "plan.html").read_text()
    assert "| candidate | replicas |" in md and "Rule of thumb" in md
    assert "<svg" in html and "A100-80GB tp=1" in html
    bad = schedkit(*args, "--price", "H100-SXM:3", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "is not GPU=DOLLARS_PER_HOUR" in bad.stderr
    none = schedkit(
        *args[:-2], "--gpu", "A100-80GB", "--max-replicas", "1", "--out", str(tmp_path / "n")
    )
    assert none.returncode == 4 and "no candidate meets the SLOs" in none.stdout
