"""Each arm also written in ``vllm bench serve``'s result format (``vllm-bench-*.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_report import fake_data, fake_run

from schedkit.bench.report.vllm_format import vllm_bench_result
from schedkit.bench.results import Results
from schedkit.bench.runner import BenchSpec, run_bench

VLLM_KEYS = {  # what vllm/benchmarks/serve.py saves for a generation benchmark
    "date", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "latencies",
    "start_times", "errors",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99")
      for m in ("ttft", "tpot", "itl", "e2el")),
}  # fmt: skip


def test_vllm_bench_files_match_schedkits_own_results(tmp_path: Path) -> None:
    spec = BenchSpec(
        workload="two-tenant-flood", max_requests=300, policies=["fcfs", "vtc", "slo"],
        rate_scale=4.0, slo_ttft_ms=2000, slo_tpot_ms=100, kv_blocks=600,
    )  # fmt: skip
    results = run_bench(spec, tmp_path)
    for index, arm in enumerate(results["arms"]):
        data = json.loads((tmp_path / f"vllm-bench-{index}-{arm['policy']}.json").read_text())
        assert set(data) >= VLLM_KEYS
        m = arm["metrics"]
        assert data["label"] == arm["policy"] and data["backend"] == "schedkit-sim"
        assert data["num_prompts"] == m["requests"] == 300
        assert data["completed"] == m["completed"] and data["failed"] == 300 - m["completed"]
        for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors"):
            assert len(data[key]) == 300, key
        done = [t for t, e in zip(data["ttfts"], data["errors"], strict=True) if not e]
        assert len(done) == m["completed"]
        assert data["median_ttft_ms"] == pytest.approx(np.median(done) * 1e3)
        assert data["p99_ttft_ms"] == pytest.approx(np.percentile(done, 99) * 1e3)
        assert data["total_output_tokens"] == m["output_tokens"]
        assert data["output_throughput"] == pytest.approx(m["throughput_tok_s"])
        assert data["request_goodput"] == pytest.approx(m["slo_met"] / data["duration"])
        assert data["mean_itl_ms"] > 0 and data["median_itl_ms"] <= data["p99_itl_ms"]
    # slo (the last arm) rejects the requests it predicts will miss: errors, no output
    rejected = [(e, n) for e, n in zip(data["errors"], data["output_lens"], strict=True) if e]
    assert len(rejected) == data["failed"] > 0
    assert all("exceeds SLO" in e and n == 0 for e, n in rejected)  # the reason, as sent


def test_a_rerun_with_other_arms_leaves_no_stale_file(tmp_path: Path) -> None:
    common: dict[str, Any] = {"workload": "poisson:rate=5,n=30", "kv_blocks": 2000}
    run_bench(BenchSpec(policies=["fcfs", "priority"], **common), tmp_path)
    run_bench(BenchSpec(policies=["fcfs"], **common), tmp_path, overwrite=True)
    assert sorted(p.name for p in tmp_path.glob("vllm-bench-*.json")) == ["vllm-bench-0-fcfs.json"]


def test_the_run_settings_come_from_the_results() -> None:
    run = fake_run("fcfs", 1.0)
    data = fake_data([run])
    live = BenchSpec(workload="azure-conv", policies=["fcfs"], engine="openai",
                     targets=["http://127.0.0.1:1"], max_concurrency=3)  # fmt: skip
    data["provenance"]["spec"] = live.model_dump(mode="json")
    data["workload"]["max_concurrency"] = 3  # the run's cap in flight, as results.json says
    out = vllm_bench_result(run, Results.model_validate(data), slo_ttft_ms=None, slo_tpot_ms=None)
    assert out["max_concurrency"] == 3 and out["burstiness"] == 1.0
    assert out["backend"] == "schedkit-sim" and out["model_id"] == "Llama-3-8B"
    assert out["workload"] == "synthetic <chat>" and out["request_goodput"] is None
