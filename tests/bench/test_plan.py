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
        met = {p["replicas"]: p["meets"] for p in c["probes"]}
        for p in c["probes"]:  # measured, or stopped early below the target
            at_most = (p["stopped_early"] or {}).get("slo_attainment_at_most")
            assert p["meets"] == (p["slo_attainment"] >= 0.9) if at_most is None else at_most < 0.9
        assert met[c["replicas"]]
        assert all(not ok for n, ok in met.items() if n < c["replicas"])
        if c["replicas"] > 1:  # the search saw the count just below miss
            assert met.get(c["replicas"] - 1) is False
    h100, a100 = sorted(result["candidates"], key=lambda c: c["gpu"] != "H100-SXM")
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
    one, four = sorted(result["candidates"], key=lambda c: c["tp"])  # listed: fitting first
    assert "needs ~" in one["error"] and "weights" in one["error"] and not one["probes"]
    assert four.get("replicas") is not None or "misses the target" in four["error"]


def test_engine_setting_variants_are_candidates() -> None:
    variants = [EngineSettings(max_num_seqs=2), EngineSettings(max_num_seqs=256)]
    result = run_plan(plan(gpus=["H100-SXM"], settings=variants, max_replicas=32))
    two, many = sorted(result["candidates"], key=lambda c: c["settings"]["max_num_seqs"])
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


def test_exactly_one_candidate_is_chosen_and_every_other_says_why() -> None:
    # H100 tp=1 x 2 and H100 tp=2 x 1 both cost $6/h: a tie, broken by SLO attainment
    prices = {"H100-SXM": 3.0, "A100-80GB": 2.0}
    result = run_plan(plan(tps=[1, 2], prices=prices, max_replicas=8))
    candidates = result["candidates"]
    outcomes = [c["outcome"] for c in candidates]
    assert outcomes.count("chosen") == 1 and outcomes[0] == "chosen"
    assert candidates[0]["gpu"] == result["best"]["gpu"]
    assert candidates[0]["tp"] == result["best"]["tp"]
    costs = [c["cost_per_hour"] for c in candidates]
    assert costs == sorted(costs)  # cost order
    for c in candidates[1:]:
        more = c["cost_per_hour"] - candidates[0]["cost_per_hour"]
        assert (f"${more:,.2f}/h more" if more else "same cost") in c["outcome"], c
    tie = next(c for c in candidates[1:] if c["cost_per_hour"] == costs[0])
    assert "lower SLO attainment" in tie["outcome"]


def test_a_candidate_meeting_no_target_is_listed_last_with_the_reason() -> None:
    result = run_plan(plan(max_replicas=2))  # one A100 does not keep up, nor two
    last = result["candidates"][-1]
    assert last["gpu"] == "A100-80GB" and "replicas" not in last
    assert (
        last["outcome"] == "not feasible: misses the target even with 2 replicas (--max-replicas)"
    )


def test_plan_md_ranks_by_cost_with_complete_headers_and_one_chosen_row(tmp_path: Path) -> None:
    from schedkit.bench.plan_report import render_plan_markdown

    result = run_plan(plan(tps=[1, 2], prices={"H100-SXM": 3.0, "A100-80GB": 2.0}))
    result["workload"] = WORKLOAD
    md = render_plan_markdown(result)
    tables = [block for block in md.split("\n\n") if block.startswith("| candidate |")]
    assert len(tables) == 2  # the candidates and every probe
    for table in tables:
        header = [h.strip() for h in table.splitlines()[0].strip("|").split("|")]
        assert all(header) and "$/h" in header, header
    candidates = [row.split(" | ") for row in tables[0].splitlines()[2:]]
    costs = [float(row[3].strip("*")) for row in candidates]
    assert costs == sorted(costs) and len(costs) == 4
    outcomes = [
        row[-1].strip(" |*") for t in tables for row in (r.split(" | ") for r in t.splitlines()[2:])
    ]
    assert outcomes.count("chosen") == 1 and candidates[0][-1] == "**chosen** |"
    assert "Chosen: " in md.splitlines()[2]  # the answer opens the report


def test_the_plan_chart_draws_the_target_and_rings_the_chosen() -> None:
    from schedkit.bench.plan_report import render_plan_html

    result = run_plan(plan(attainment=0.8, prices={"H100-SXM": 3.0, "A100-80GB": 2.0}))
    html = render_plan_html(result)
    assert 'class="ref level"' in html and ">target 80%</text>" in html
    assert 'class="mark"' in html and ">chosen</text>" in html
    assert "$ per hour" in html  # priced: attainment against cost
    assert html.count("<tr class=chosen>") == 1


def test_target_is_the_old_name_of_attainment() -> None:
    with pytest.warns(DeprecationWarning, match=r"PlanSpec\(attainment=\.\.\.\)"):
        old = plan(target=0.8)
    assert old.attainment == 0.8


def test_request_rate_offers_that_many_requests_per_second() -> None:
    result = run_plan(plan(gpus=["H100-SXM"], request_rate=20.0))
    assert result["offered_rps"] == pytest.approx(20.0)
    assert result["rate_scale"] == pytest.approx(0.5, rel=0.1)  # the workload offers ~40
    bench = BenchSpec(workload=WORKLOAD, policies=["fcfs"], slo_ttft_ms=300.0, rate_scale=2.0)
    with pytest.raises(ValueError, match="give --rate-scale or --request-rate, not both"):
        PlanSpec(bench=bench, gpus=["H100-SXM"], request_rate=20.0)


def test_the_command_takes_the_benchs_names(tmp_path: Path) -> None:
    args = ["plan", "--workload", WORKLOAD, "--slo-ttft-ms", "300", "--gpu", "H100-SXM"]
    new = schedkit(*args, "--attainment", "0.8", "--request-rate", "20", "--out", str(tmp_path))
    assert new.returncode == 0, new.stderr
    result = json.loads((tmp_path / "plan.json").read_text())
    assert result["attainment"] == 0.8 and result["offered_rps"] == pytest.approx(20.0)
    assert "deprecated" not in new.stderr
    old = schedkit(*args, "--target", "0.8", "--out", str(tmp_path / "old"))
    assert old.returncode == 0, old.stderr
    assert json.loads((tmp_path / "old" / "plan.json").read_text())["attainment"] == 0.8
    assert old.stderr.count("--target is deprecated") == 1 and "--attainment 0.8" in old.stderr
    for flags, message in (
        (["--attainment", "0.8", "--target", "0.8"], "give --attainment only"),
        (["--rate-scale", "2", "--request-rate", "20"], "not both"),
        (["--rate-scale", "1,2"], "a plan sizes a deployment for one load"),
        (["--request-rate", "inf"], "--request-rate 'inf' is not a positive number"),
    ):
        bad = schedkit(*args, *flags, "--out", str(tmp_path / "bad"))
        assert bad.returncode == 2 and message in " ".join(bad.stderr.split()), bad.stderr
    assert not (tmp_path / "bad").exists()


def test_the_command(tmp_path: Path) -> None:
    args = ["plan", "--workload", WORKLOAD, "--slo-ttft-ms", "300", "--gpu", "H100-SXM,A100-80GB"]
    proc = schedkit(
        *args, "--price", "H100-SXM=3", "--price", "A100-80GB=2", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Chosen: H100-SXM tp=1 x 2 replicas = 2 GPUs, $6.00/h." in proc.stdout
    assert "$4.00/h more" in proc.stdout  # 5 A100s: $10/h, in the candidates' table
    result = json.loads((tmp_path / "plan.json").read_text())
    assert result["best"]["cost_per_hour"] > 0
    md, html = (tmp_path / "plan.md").read_text(), (tmp_path / "plan.html").read_text()
    assert "| candidate | replicas | GPUs | $/h |" in md and "Rule of thumb" in md
    assert "<svg" in html and "A100-80GB tp=1" in html
    bad = schedkit(*args, "--price", "H100-SXM:3", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "is not GPU=DOLLARS_PER_HOUR" in bad.stderr
    none = schedkit(
        *args[:-2], "--gpu", "A100-80GB", "--max-replicas", "1", "--out", str(tmp_path / "n")
    )
    assert none.returncode == 4 and "No candidate meets the SLOs" in none.stdout
