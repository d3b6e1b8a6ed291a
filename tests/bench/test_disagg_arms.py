"""Disaggregated bench arms (schedkit/bench/disagg.py): compared pairwise with aggregated
arms on the identical stream, each pool with its own TP, GPU and policies, recorded in
every output; bad deployments refused before anything runs, naming the arm, the key and
the valid values; sweeps run them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bench_cli import schedkit

from schedkit.bench.arms import parse_arm
from schedkit.bench.runner import Bench, BenchSpec, run_bench
from schedkit.bench.sweep.run import run_sweep
from schedkit.bench.sweep.spec import SweepSpec
from schedkit.errors import SchedkitError

LOADED = "poisson:rate=30,n=120,prompt=1500,output=80"
PD = "prefill_replicas=1,decode_replicas=1"


def test_an_aggregated_and_a_disaggregated_arm_compared_on_one_stream(tmp_path: Path) -> None:
    spec = BenchSpec(
        workload=LOADED,
        arms=[
            parse_arm("name=agg2,policy=least-loaded,replicas=2"),
            parse_arm(f"name=pd,policy=least-loaded,{PD},decode_tp=2,kv_link=pcie4"),
        ],
        slo_ttft_ms=500.0,
        slo_tpot_ms=40.0,
        jobs=1,
    )
    results = run_bench(spec, tmp_path).to_json()
    agg, pd = results["arms"]
    assert agg["metrics"]["requests"] == pd["metrics"]["requests"] == 120
    assert "disaggregated" not in agg["metrics"]
    assert pd["metrics"]["routed"] == [120] and pd["metrics"]["disaggregated"]["routed_decode"] == [
        120
    ]
    deployment = pd["engine"]["disaggregated"]
    assert (deployment["prefill"]["tp"], deployment["decode"]["tp"], deployment["gpus"]) == (
        1,
        2,
        3,
    )
    assert deployment["decode"]["kv_blocks"] > 2 * deployment["prefill"]["kv_blocks"]
    assert deployment["kv_link"]["gbs_per_gpu"] == 32.0  # pcie4, over min(1, 2) lanes
    assert deployment["ttft"].startswith("vLLM's disaggregated proxy")
    phases = pd["metrics"]["disaggregated"]["phases_ms"]
    assert list(phases) == [
        "prefill_queue", "prefill", "decode_kv_wait", "link_wait", "transfer", "decode_queue",
        "decode",
    ]  # fmt: skip
    # 1,500 tokens of 128 KiB over 32 GB/s take ~6 ms, plus the 0.6 ms fixed cost
    assert 5.0 < phases["transfer"]["p50"] < 9.0
    assert pd["metrics"]["ttft_ms"]["p50"] > phases["prefill"]["p50"] + phases["transfer"]["p50"]
    (comparison,) = results["comparisons"]
    assert comparison["policy"] == "pd"
    report = (tmp_path / "report.md").read_text()
    assert "| deployment | none | 1 prefill (H100-SXM, tp 1," in report
    assert "1 decode (H100-SXM, tp 2," in report and "3 GPUs |" in report
    assert "### Disaggregated: where time went" in report and "| KV transfer | pd |" in report
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["arms"][1]["engine_settings"]["kv_link"] == "pcie4"


def test_each_pool_runs_its_own_policies(tmp_path: Path) -> None:
    arm = parse_arm(f"name=pd,policy=least-loaded,decode_policy=shortest-prompt,{PD}")
    assert (arm.policy, arm.prefill_policy, arm.decode_policy) == (
        "least-loaded",
        None,
        "shortest-prompt",
    )
    bench = Bench(BenchSpec(workload=LOADED, arms=[arm]))
    prefill, decode = bench.pool_configs[0]
    assert prefill is None and decode is not None and decode.label == "shortest-prompt"
    unnamed = parse_arm(f"policy=fcfs,prefill_policy=sjf,{PD}")
    assert Bench(BenchSpec(workload=LOADED, arms=[unnamed])).labels == [
        f"fcfs[prefill_policy=sjf,{PD}]"
    ]


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ("name=a,prefill_replicas=0,decode_replicas=2", r"--arm a: prefill_replicas=0: a disagg"),
        ("name=a,prefill_replicas=2", r"--arm a: decode_replicas=0: a disaggregated deployment"),
        (f"name=a,{PD},prefill_tp=3", r"--arm a: prefill_tp=3 cannot split Llama-3-8B across GPUs; valid values: 1, 2, 4, 8"),
        (f"name=a,{PD},kv_link=0", r"--arm a: kv_link '0': a link needs a bandwidth above 0"),
        (f"name=a,{PD},kv_link=infiniband", r"--arm a: kv_link: unknown link 'infiniband'; valid links: nvlink3, .*; or give GB/s per GPU"),
        (f"name=a,{PD},kv_blocks=20", r"--arm a: the decode pool's KV cache of 20 blocks \(320 tokens on H100-SXM x tp=1\) cannot hold the longest request \([0-9,]+ tokens\)"),
        (f"name=a,{PD},replicas=2", r"--arm a: replicas=2 counts aggregated replicas"),
        (f"name=a,{PD},decode_gpu=H999", r"--arm a: decode pool \(decode_gpu=H999\): unknown GPU"),
    ],
)  # fmt: skip
def test_a_deployment_that_cannot_serve_is_refused_before_anything_runs(
    arm: str, message: str
) -> None:
    with pytest.raises(SchedkitError, match=message):
        Bench(BenchSpec(workload=LOADED, arms=[parse_arm(arm)]))


def test_pool_keys_outside_a_disaggregated_arm_and_on_a_real_engine_are_refused() -> None:
    with pytest.raises(SchedkitError, match=r"--arm 'a': decode_policy sets the policies of a dis"):
        parse_arm("name=a,decode_policy=sjf")
    spec = BenchSpec(
        workload=LOADED,
        policies=["fcfs"],
        engine="vllm-twin",
        prefill_replicas=1,
        decode_replicas=1,
    )
    with pytest.raises(SchedkitError, match=r"--prefill-replicas 1 \(disaggregated serving runs"):
        Bench(spec)


def test_the_command_line_takes_the_pool_flags(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", LOADED, "--policy", "least-loaded", "--prefill-replicas", "1",
        "--decode-replicas", "2", "--kv-link", "nvlink4", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["engine"]["disaggregated"]["decode"]["replicas"] == 2
    assert sum(results["arms"][0]["metrics"]["disaggregated"]["routed_decode"]) == 120
    bad = schedkit(
        "bench", "--workload", LOADED, "--policy", "fcfs", "--prefill-replicas", "1", "--out", "x"
    )
    assert bad.returncode == 2 and "decode_replicas=0" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_sweep_runs_a_disaggregated_arm(tmp_path: Path) -> None:
    bench = BenchSpec(
        workload="poisson:rate=10,n=80,prompt=1500,output=60",
        arms=[parse_arm(f"name=pd,{PD}")],
        slo_ttft_ms=400.0,
        jobs=1,
    )
    results = run_sweep(SweepSpec(bench=bench, rate_scales=[0.5, 4.0], replicates=1), tmp_path)
    (arm,) = results["arms"]
    p90 = [c["mean"] for c in arm["curves"]["ttft_p90_ms"]]
    assert len(p90) == 2 and p90[1] > p90[0]  # more load, longer prefill queues
