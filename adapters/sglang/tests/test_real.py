"""Real-engine A/B: ``schedkit bench --engine sglang`` on an in-process SGLang (tiny Llama).

These check the replay, not the policies: every request submitted, streamed and
recorded, whatever order the arm's policy gives them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from schedkit.bench.engines.requests import model_info
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.records import RequestRecord

from schedkit_sglang.harness.real import RealEngine, run_real_arm, scheduler_counters

SCHEDKIT = str(Path(sys.executable).with_name("schedkit"))
N_REQUESTS = 30


@pytest.fixture(scope="session")
def real_model_dir(model_dir: Path) -> Path:
    return model_dir


@pytest.fixture(scope="session")
def shared_prefix_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 requests at ~30/s, two tenants, three families sharing a 32-token prefix."""
    rng = random.Random(1)
    lines = [json.dumps({"workload": {"name": "shared-prefix", "hash_block_tokens": 16}})]
    t = 0.0
    for i in range(N_REQUESTS):
        t += rng.expovariate(30.0)
        request = {
            "arrival_s": round(t, 4),
            "prompt_tokens": rng.randrange(40, 96),
            "output_tokens": rng.randrange(2, 9),
            "tenant": "a" if i % 2 else "b",
            "hash_ids": [100 + i % 3, 200 + i % 3],
        }
        lines.append(json.dumps(request))
    path = tmp_path_factory.mktemp("trace") / "shared-prefix.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _schedkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEDKIT, *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bench_two_arms_on_sglang(
    real_model_dir: Path, shared_prefix_trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ab"
    proc = _schedkit(
        "bench", "--engine", "sglang", "--model", str(real_model_dir),
        "--workload", str(shared_prefix_trace),
        "--policy", "fcfs", "--policy", "shortest-prompt", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["engine"]["engine"] == "sglang"
    real = results["engine"]["real"]
    assert real["clock"] == "wall" and real["clipped_requests"] == 0 and real["kv_tokens"] > 0
    assert [arm["policy"] for arm in results["arms"]] == ["fcfs", "shortest-prompt"]
    for arm in results["arms"]:
        m = arm["metrics"]
        assert m["requests"] == N_REQUESTS and m["completed"] == N_REQUESTS, m
        assert m["rejected"] == 0 and m["unfinished"] == 0
        assert m["ttft_ms"]["p50"] > 0 and m["itl_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
        assert m["e2e_ms"]["p50"] >= m["ttft_ms"]["p50"] and m["throughput_tok_s"] > 0
        # Families after their first request reuse the 32-token shared prefix.
        assert 0 < m["prefix_hit_rate"] < 1
        assert m["policy_errors"] == 0 and m["steps"] > 0  # SGLang's batches, read back
    assert (out / "report.md").is_file() and (out / "report.html").is_file()


def test_engine_sglang_needs_a_model_directory(tmp_path: Path) -> None:
    workload = "poisson:rate=20,n=4,prompt=32,output=8"
    no_model = _schedkit(
        "bench", "--engine", "sglang", "--workload", workload,
        "--policy", "fcfs", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert no_model.returncode != 0
    assert "--engine sglang needs --model PATH to a local model directory" in no_model.stderr
    assert "Traceback" not in no_model.stderr
    missing = _schedkit(
        "bench", "--engine", "sglang", "--model", str(tmp_path / "missing"),
        "--workload", workload, "--policy", "fcfs", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "unknown model" in " ".join(missing.stderr.split())
    assert not (tmp_path / "out" / "results.json").exists()


def test_policy_errors_in_sglangs_scheduler_reach_the_result(
    real_model_dir: Path, tmp_path: Path
) -> None:
    # The policies run in SGLang's scheduler process; the bench reads their faults there.
    config = tmp_path / "flaky.json"
    options = {"test-flaky": {"seed": 3, "fault_rate": 0.2}}
    config.write_text(json.dumps({"policy": ["test-flaky"], "options": options}))
    spec = BenchSpec(
        workload="poisson:rate=40,n=12,prompt=32,output=8",
        policies=[str(config)],
        engine="sglang",
        model=str(real_model_dir),
    )
    result = run_real_arm(Bench(spec), 0, 1.0)
    assert all(r.finish_reason == "length" for r in result.records)  # none lost
    assert result.policy_errors > 0
    assert sum(result.policy_errors_by_hook.values()) == result.policy_errors
    assert all(key.startswith("test-flaky.") for key in result.policy_errors_by_hook)
    assert result.steps > 0


def test_scheduler_counters_sum_over_schedulers_and_default_to_zero() -> None:
    ours = {"steps": 5, "policy_errors": 2, "policy_errors_by_hook": {"p.order_waiting": 2}}
    ours["slow_hook_calls"] = {"p.plan_batch": 3}
    info = {"internal_states": [{"schedkit": ours}, {"schedkit": ours}, {"other": 1}]}
    counters = scheduler_counters(info)
    assert (counters.steps, counters.policy_errors) == (10, 4)
    assert counters.policy_errors_by_hook == {"p.order_waiting": 4}
    assert counters.slow_hook_calls == {"p.plan_batch": 6}
    assert scheduler_counters({}).policy_errors == 0


# -- reading streamed outputs (no engine started) --------------------------------------


@pytest.fixture
def replay(real_model_dir: Path) -> RealEngine:
    spec = BenchSpec(
        workload="poisson:rate=20,n=3,prompt=32,output=8",
        policies=["fcfs"],
        engine="sglang",
        model=str(real_model_dir),
    )
    return RealEngine(Bench(spec), 0, 1.0, model_info(spec.settings.model, "sglang"))


def _meta(tokens: int, finish: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"completion_tokens": tokens, "finish_reason": finish, **extra}


def test_tokens_and_finish_from_streamed_outputs(replay: RealEngine) -> None:
    rec: RequestRecord = replay.records[0]
    replay.on_output(rec, _meta(1), 0.5)
    replay.on_output(rec, _meta(2), 0.6)
    replay.on_output(rec, _meta(5), 0.9)  # three tokens arrive together
    done = {"type": "length", "length": 8}
    replay.on_output(rec, _meta(8, done, cached_tokens=999, num_retractions=1), 1.0)
    assert (rec.first_token_s, rec.finish_s, rec.output_tokens) == (0.5, 1.0, 8)
    assert rec.finish_reason == "length" and rec.preemptions == 1
    assert rec.cached_tokens == rec.prompt_tokens  # SGLang counts re-hits after retraction
    gaps = replay.recorder._gaps
    assert sum(gaps.values()) == 7 and gaps[0.0] == 4  # 7 gaps; 2 + 2 came with no gap
    assert replay.result.preemptions == 1


def test_rejection_and_abort_from_streamed_outputs(replay: RealEngine) -> None:
    rejected, aborted = replay.records[0], replay.records[1]
    reason = {"type": "abort", "message": "rejected: tenant over quota", "status_code": 503}
    replay.on_output(rejected, _meta(0, reason), 0.2)
    assert rejected.rejected and rejected.reject_reason == "tenant over quota"
    assert rejected.finish_s is None and rejected.first_token_s is None
    assert replay.result.rejections == {"tenant over quota": 1}
    replay.on_output(aborted, _meta(1), 0.3)
    replay.on_output(aborted, _meta(1, {"type": "abort", "message": "client gone"}), 0.4)
    assert aborted.finish_reason == "aborted" and aborted.finish_s == 0.4
    assert replay.result.rejections == {"tenant over quota": 1}


def test_record_steps_on_sglang_then_calibrate(real_model_dir: Path, tmp_path: Path) -> None:
    """--record-steps writes one row per SGLang batch from its scheduler process; every
    prompt token not served from the cache is in a prefill row, every later token in a
    decode row."""
    import csv

    from schedkit.sim.cost.calibration import read_steps

    out, steps = tmp_path / "rec", tmp_path / "steps"
    proc = _schedkit(
        "bench", "--engine", "sglang", "--model", str(real_model_dir),
        "--workload", "poisson:rate=40,n=24,prompt=48,output=8",
        "--policy", "fcfs", "--record-steps", str(steps), "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows, meta = read_steps(steps / "fcfs.csv")
    assert meta == {"engine": "sglang", "model": str(real_model_dir), "gpu": "cpu", "tp": 1}
    results = json.loads((out / "results.json").read_text())
    assert results["arms"][0]["metrics"]["completed"] == 24
    with (out / "requests.csv").open() as f:
        table = list(csv.DictReader(f))
    prompt = sum(int(t["prompt_tokens"]) - int(t["cached_tokens"]) for t in table)
    assert sum(r.prefill_tokens for r in rows) == prompt
    assert sum(r.decode_tokens for r in rows) == sum(int(t["output_tokens"]) - 1 for t in table)
    assert all(r.seconds > 0 for r in rows) and [r.start_s for r in rows] == sorted(
        r.start_s for r in rows
    )
    assert all(r.kv_tokens >= r.prefill_tokens + r.decode_tokens for r in rows)
    fitted = _schedkit("calibrate", str(steps / "fcfs.csv"), "--out", str(tmp_path / "cpu.json"))
    assert fitted.returncode == 0, fitted.stderr
    assert "held-out all" in fitted.stdout
