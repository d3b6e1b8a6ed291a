"""``schedkit plan --disagg``: each phase sized alone, then each prefill TP x decode TP
grown from those sizes with both phases running, ranked with the aggregated candidates
by cost, each with the rate it serves per GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_bench_cli import schedkit

from schedkit.bench.disagg import PoolSetup
from schedkit.bench.plan import PlanSpec, run_plan
from schedkit.bench.plan_probe import Instant, Sizes, alone
from schedkit.bench.plan_report import candidate_name, render_plan_markdown
from schedkit.bench.runner import Bench, BenchSpec

# long prompts at a TTFT SLO tight enough that prefill capacity decides the size
WORKLOAD = "poisson:rate=12,n=240,prompt=3000,output=100"


def plan(**changes: Any) -> PlanSpec:
    bench = BenchSpec(
        workload=WORKLOAD, policies=["least-loaded"], slo_ttft_ms=600.0, slo_tpot_ms=60.0, jobs=1
    )
    return PlanSpec(bench=bench, **{"gpus": ["H100-SXM"], "disagg": True, **changes})


def test_sizes_grow_one_instance_at_a_time_from_the_phases_alone() -> None:
    grow = Sizes(start=(3, 2), first="decode")
    assert [grow(n) for n in range(1, 6)] == [(3, 2), (3, 3), (4, 3), (4, 4), (5, 4)]
    grow = Sizes(start=(1, 4), first="prefill")
    assert [grow(n) for n in range(1, 4)] == [(1, 4), (2, 4), (2, 5)]
    assert Sizes(phase="prefill")(5) == (5, 1) and Sizes(phase="decode")(5) == (1, 5)


def test_a_phase_alone_has_a_counterpart_that_takes_no_time_and_never_fills() -> None:
    bench = Bench(
        BenchSpec(
            workload=WORKLOAD, policies=["fcfs"], prefill_replicas=2, decode_replicas=3, jobs=1
        )
    )
    d = bench.disagg
    assert d is not None
    prefill = alone(d, "prefill")
    assert prefill.prefill == d.prefill
    free: PoolSetup = prefill.decode
    assert free.replicas == 1 and isinstance(free.cost, Instant)
    assert free.config.num_blocks > 10**9 and free.config.max_num_seqs > 10**9
    assert free.cost.step_time(8192, 256, 10**6, 10**9) == 0.0
    assert alone(d, "decode").decode == d.decode


def test_the_phases_are_sized_alone_and_each_pair_searched_from_them() -> None:
    result = run_plan(plan(tps=[1, 2], max_replicas=16, prune=False))
    phases = {(c["phase"], c["tp"]): c for c in result["phases"]}
    assert set(phases) == {("prefill", 1), ("prefill", 2), ("decode", 1), ("decode", 2)}
    for c in phases.values():  # the fewest instances of the phase alone meeting the target
        met = {p["replicas"]: p["meets"] for p in c["probes"]}
        assert met[c["replicas"]] and met.get(c["replicas"] - 1, False) is False
    # TP 2 halves each step's weights and doubles the KV: fewer prefill instances
    assert phases["prefill", 2]["replicas"] <= phases["prefill", 1]["replicas"]
    pairs = [c for c in result["candidates"] if "pool_tps" in c]
    assert sorted(tuple(c["pool_tps"]) for c in pairs) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for c in pairs:
        tp_p, tp_d = c["pool_tps"]
        start = (phases["prefill", tp_p]["replicas"], phases["decode", tp_d]["replicas"])
        first = c["probes"][0]
        assert c["phase_sizes"] == {"prefill": start[0], "decode": start[1]}
        assert (first["prefill_replicas"], first["decode_replicas"]) == start
        if "replicas" in c:  # met the target: its size and GPUs from its pools
            p, n = c["disaggregated"]["prefill"][0], c["disaggregated"]["decode"][0]
            assert p >= start[0] and n >= start[1]
            assert c["gpus"] == p * tp_p + n * tp_d
            assert c["goodput_per_gpu_rps"] == c["offered_rps"] / c["gpus"]
    assert sum("replicas" in c for c in pairs) >= 3
    aggregated = [c for c in result["candidates"] if "pool_tps" not in c]
    assert len(aggregated) == 2 and all("goodput_per_gpu_rps" in c for c in aggregated)
    assert [c["outcome"] for c in result["candidates"]].count("chosen") == 1
    md = render_plan_markdown(result)
    assert "## Disaggregated: each phase sized alone" in md
    assert "| H100-SXM prefill tp=1 alone |" in md and "req/s per GPU" in md
    assert "H100-SXM disagg prefill tp=2, decode tp=1" in md


def test_the_command_plans_disaggregated(tmp_path: Path) -> None:
    proc = schedkit(
        "plan", "--workload", WORKLOAD, "--gpu", "H100-SXM", "--slo-ttft-ms", "600",
        "--slo-tpot-ms", "60", "--disagg", "--kv-link", "nvlink4", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "req/s per GPU" in proc.stdout and "disagg" in proc.stdout
    result = json.loads((tmp_path / "plan.json").read_text())
    assert result["disagg"] is True and len(result["phases"]) == 2
    assert any("pool_tps" in c for c in result["candidates"])


def test_stopping_probes_early_changes_no_answer() -> None:
    """A disaggregated probe stops once enough requests are certain to miss; a request
    between its prefill and its decode is not one of them."""
    early = run_plan(plan(tps=[1], max_replicas=8, prune=False))
    full = run_plan(plan(tps=[1], max_replicas=8, early_stop=False, prune=False))

    def answers(result: dict[str, Any]) -> list[Any]:
        return [
            (c.get("pool_tps"), c.get("phase"), c.get("replicas"))
            for c in [*result["candidates"], *result["phases"]]
        ]

    assert answers(early) == answers(full)
    stopped = [p for c in early["candidates"] for p in c["probes"] if p["stopped_early"]]
    assert stopped  # the comparison covered probes that stopped


def test_pruning_searches_less_and_changes_no_choice() -> None:
    """A disaggregated candidate is searched only while it could be cheaper than the
    cheapest aggregated one: the chosen deployment is the same, with fewer probes."""
    whole = run_plan(plan(tps=[1, 2], max_replicas=16, prune=False))
    pruned = run_plan(plan(tps=[1, 2], max_replicas=16))
    assert pruned["best"]["gpus"] == whole["best"]["gpus"]
    assert candidate_name(pruned["best"]) == candidate_name(whole["best"])

    def probes(result: dict[str, Any]) -> int:
        return sum(len(c["probes"]) for c in [*result["candidates"], *result["phases"]])

    assert probes(pruned) < probes(whole)
    best = (pruned["best"]["gpus"],)
    for c in [*pruned["candidates"], *pruned["phases"]]:
        if "not searched" in c.get("error", ""):
            assert "than the cheapest" in c["error"]
        elif "pool_tps" in c and "replicas" in c:  # sized: no more GPUs than the cheapest
            assert (c["gpus"],) <= best
