"""Real-engine A/B: ``schedkit bench --engine vllm`` on an in-process vLLM (tiny Llama)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from schedkit import Admission, EngineView, Policy, RequestView, hookimpl
from schedkit.bench.runner import BenchSpec, run_bench

SCHEDKIT = str(Path(sys.executable).with_name("schedkit"))
ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}


def _schedkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEDKIT, *args],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bench_two_arms_on_real_engine(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab"
    proc = _schedkit(
        "bench", "--engine", "vllm", "--model", str(tiny_model),
        "--workload", "poisson:rate=20,n=24,prompt=32,output=8",
        "--policy", "fcfs", "--policy", "priority", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["engine"]["engine"] == "vllm"
    real = results["engine"]["real"]
    assert real["clock"] == "wall" and real["clipped_requests"] == 0
    assert [arm["policy"] for arm in results["arms"]] == ["fcfs", "priority"]
    for arm in results["arms"]:
        m = arm["metrics"]
        assert m["requests"] == 24 and m["completed"] == 24, m
        assert m["rejected"] == 0 and m["unfinished"] == 0 and m["policy_errors"] == 0
        assert m["ttft_ms"]["p50"] > 0 and m["itl_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
        assert m["queue_ms"]["p50"] >= 0 and m["throughput_tok_s"] > 0
    assert (out / "report.md").is_file() and (out / "report.html").is_file()


def test_arms_with_their_own_engine_settings_on_real_engines(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Each arm builds its vLLM engine with its own settings (``--arm``)."""
    out = tmp_path / "arms"
    proc = _schedkit(
        "bench", "--engine", "vllm", "--model", str(tiny_model),
        "--workload", "poisson:rate=40,n=24,prompt=32,output=16",
        "--arm", "name=seqs8,max_num_seqs=8", "--arm", "name=seqs1,max_num_seqs=1",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    eight, one = results["arms"]
    assert eight["engine"]["real"]["max_num_seqs"] == 8  # vLLM's own scheduler
    assert one["engine"]["real"]["max_num_seqs"] == 1
    assert results["engine"]["gpu"] == "this machine (wall clock)"  # no arm used a profile
    assert all(arm["metrics"]["completed"] == 24 for arm in results["arms"])
    # one sequence at a time: the others wait
    assert one["metrics"]["queue_ms"]["p90"] > eight["metrics"]["queue_ms"]["p90"]


def test_record_steps_on_the_real_engine_then_calibrate(tiny_model: Path, tmp_path: Path) -> None:
    """--record-steps writes one row per vLLM step; every scheduled token is in a row."""
    from schedkit.sim.cost.calibration import read_steps

    out, steps = tmp_path / "rec", tmp_path / "steps"
    proc = _schedkit(
        "bench", "--engine", "vllm", "--model", str(tiny_model),
        "--workload", "poisson:rate=40,n=40,prompt=48,output=12",
        "--policy", "fcfs", "--record-steps", str(steps), "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows, meta = read_steps(steps / "fcfs.csv")
    assert meta == {"engine": "vllm", "model": str(tiny_model), "gpu": "cpu", "tp": 1}
    results = json.loads((out / "results.json").read_text())
    records = json.loads((out / "results.json").read_text())["arms"][0]["metrics"]
    assert records["completed"] == 40 and len(rows) >= 12
    # every prompt token is prefilled once (no prefix hits here), every later token decoded
    with (out / "requests.csv").open() as f:  # this environment has no pyarrow
        table = list(csv.DictReader(f))
    assert sum(r.prefill_tokens for r in rows) == sum(int(t["prompt_tokens"]) for t in table)
    assert sum(r.decode_tokens for r in rows) == sum(int(t["output_tokens"]) - 1 for t in table)
    starts = [r.start_s for r in rows]
    assert starts == sorted(starts) and all(r.seconds > 0 for r in rows)
    assert all(r.kv_tokens >= r.prefill_tokens + r.decode_tokens for r in rows)
    assert results["engine"]["engine"] == "vllm"
    fitted = _schedkit("calibrate", str(steps / "fcfs.csv"), "--out", str(tmp_path / "cpu.json"))
    assert fitted.returncode == 0, fitted.stderr
    assert "held-out all" in fitted.stdout


class BlockTenant(Policy):
    """Reject every request of tenant ``blocked``."""

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject("tenant blocked") if request.tenant == "blocked" else None


def test_rejections_on_real_engine(
    tiny_model: Path, tmp_path: Path, register_policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    register_policy("block-tenant", BlockTenant)
    workload = tmp_path / "two-tenants.toml"
    workload.write_text(
        'name = "two-tenants"\nn = 16\n'
        '[[tenant]]\nname = "ok"\nrate = 20.0\nprompt_mean = 32\noutput_mean = 8\n'
        '[[tenant]]\nname = "blocked"\nrate = 10.0\nprompt_mean = 32\noutput_mean = 8\n'
    )
    spec = BenchSpec(
        workload=str(workload), policies=["block-tenant+fcfs"], engine="vllm", model=str(tiny_model)
    )
    results = run_bench(spec, tmp_path / "out")
    m = results["arms"][0]["metrics"]
    blocked = results["workload"]
    assert m["requests"] == 16 and m["unfinished"] == 0, m
    assert m["rejected"] > 0 and m["completed"] == 16 - m["rejected"], (m, blocked)
    assert m["rejections"] == {"tenant blocked": m["rejected"]}
    assert m["ttft_ms"]["p50"] > 0


def test_engine_vllm_needs_a_model_directory(tmp_path: Path) -> None:
    proc = _schedkit(
        "bench", "--engine", "vllm", "--workload", "poisson:rate=20,n=4,prompt=32,output=8",
        "--policy", "fcfs", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--engine vllm needs --model PATH to a local model directory" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_requests_longer_than_the_model_are_clipped() -> None:
    from schedkit.bench.engines.requests import fit_traces as _fit
    from schedkit.workload import TraceRequest

    traces = [TraceRequest("a", 0.0, 100, 20), TraceRequest("b", 0.1, 600, 20)]
    max_model_len, fitted, clipped = _fit(traces, 512)
    assert clipped == 1 and max_model_len == 512
    assert (fitted[0].prompt_tokens, fitted[1].prompt_tokens, fitted[1].output_tokens) == (
        100,
        492,
        20,
    )
    assert _fit(traces[:1], 512)[0] == 121
