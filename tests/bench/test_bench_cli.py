"""The `schedkit` command end to end, as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SMALL = "poisson:rate=40,n=400,prompt=600,output=60"


def schedkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {}), "COLUMNS": "200"},
    )


def bench(out: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = schedkit("bench", *args, "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


def install_fake_plugin(root: Path, name: str, module: str, source: str) -> dict[str, str]:
    """A real installed distribution (dist-info + module) on PYTHONPATH."""
    dist = root / f"schedkit_{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: schedkit-{module}\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[schedkit.policies]\n{name} = {module}:Plugin\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    return {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}


def test_ab_bench_writes_results_and_reports(tmp_path: Path) -> None:
    results = bench(
        tmp_path, "--workload", SMALL, "--policy", "fcfs", "--policy", "priority",
        "--slo-ttft-ms", "500", "--slo-tpot-ms", "60", "--kv-blocks", "2000",
    )  # fmt: skip
    assert [arm["policy"] for arm in results["arms"]] == ["fcfs", "priority"]
    assert results["workload"]["requests"] == 400
    assert results["engine"]["num_blocks"] == 2000
    for arm in results["arms"]:
        m = arm["metrics"]
        assert m["requests"] == 400 and m["completed"] + m["rejected"] == 400
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
            assert set(m[key]) >= {"mean", "p50", "p90", "p99"}
        for key in (
            "throughput_tok_s", "preemptions", "recomputed_tokens", "prefix_hit_rate",
            "kv_usage_mean", "slo_attainment", "policy_errors",
        ):  # fmt: skip
            assert key in m
        assert 0 <= m["slo_attainment"] <= 1
    assert results["comparisons"][0]["verdicts"]
    html = (tmp_path / "report.html").read_text()
    assert html.count("<svg") >= 4 and "priority" in html
    assert "fcfs" in (tmp_path / "report.md").read_text()


def test_every_arm_sees_the_identical_request_stream(tmp_path: Path) -> None:
    results = bench(
        tmp_path, "--workload", "gamma:rate=30,cv=3,n=300", "--policy", "fcfs",
        "--policy", "fcfs+priority", "--seed", "7",
    )  # fmt: skip
    a, b = (arm["metrics"] for arm in results["arms"])
    assert a["requests"] == b["requests"] == 300
    assert a["output_tokens"] == b["output_tokens"]


def test_tenants_get_a_breakdown_and_jain_index(tmp_path: Path) -> None:
    results = bench(
        tmp_path, "--workload", "two-tenant-flood", "--max-requests", "600", "--policy", "fcfs",
        "--kv-blocks", "3000",
    )  # fmt: skip
    m = results["arms"][0]["metrics"]
    assert set(m["tenants"]) == {"flood", "quiet"}
    assert 0 < m["jain_fairness"] <= 1 and 0 < m["jain_ttft"] <= 1


def test_goodput_search_finds_a_rate(tmp_path: Path) -> None:
    results = bench(
        tmp_path, "--workload", SMALL, "--policy", "fcfs", "--slo-ttft-ms", "300",
        "--slo-tpot-ms", "50", "--goodput", "--kv-blocks", "2000",
    )  # fmt: skip
    m = results["arms"][0]["metrics"]
    assert m["goodput_rps"] > 0
    assert m["goodput_rate_scale"] > 0


def test_goodput_without_slo_is_refused(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--goodput", "--out", str(tmp_path)
    )
    assert proc.returncode == 2
    assert "--slo-ttft-ms" in proc.stderr


@pytest.mark.parametrize(
    ("flag", "value", "listed"),
    [
        ("--workload", "no-such-trace", "azure-conv"),
        ("--model", "GPT-9", "Llama-3-8B"),
        ("--gpu", "TPU-v9", "H100-SXM"),
        ("--policy", "no-such-policy", "priority"),
    ],
)
def test_unknown_names_list_the_known_ones(
    tmp_path: Path, flag: str, value: str, listed: str
) -> None:
    args = {"--workload": SMALL, "--policy": "fcfs", flag: value}
    proc = schedkit("bench", *[x for kv in args.items() for x in kv], "--out", str(tmp_path))
    assert proc.returncode == 2
    assert value in proc.stderr and listed in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_trace_row_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "mine.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.0000000,lots,44\n"
    )
    proc = schedkit(
        "bench", "--workload", str(trace), "--policy", "fcfs", "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 2
    assert "mine.csv" in proc.stderr and "3" in proc.stderr


def test_a_policy_that_raises_loses_no_request(tmp_path: Path) -> None:
    env = install_fake_plugin(
        tmp_path / "site",
        "flaky",
        "flaky_policy",
        """
        import random
        from schedkit import Policy, hookimpl

        class Plugin(Policy):
            def __init__(self, options=None):
                super().__init__(options)
                self.rng = random.Random(0)

            def maybe_fail(self):
                if self.rng.random() < 0.1:
                    raise RuntimeError("flaky")

            @hookimpl
            def order_waiting(self, waiting, engine):
                self.maybe_fail()
                return sorted(waiting, key=lambda r: r.num_prompt_tokens)

            @hookimpl
            def select_victims(self, running, needing, engine):
                self.maybe_fail()
                return list(reversed(running))
        """,
    )
    results = bench(
        tmp_path / "out", "--workload", "poisson:rate=60,n=500,prompt=800,output=100",
        "--policy", "flaky", "--kv-blocks", "400", env=env,
    )  # fmt: skip
    m = results["arms"][0]["metrics"]
    assert m["completed"] + m["rejected"] == 500 and m["unfinished"] == 0
    assert all("KV blocks" in reason for reason in m["rejections"])  # too long for the cache
    assert m["preemptions"] > 0
    assert m["policy_errors"] > 0
    assert set(m["policy_errors_by_hook"]) <= {"flaky.order_waiting", "flaky.select_victims"}


def linear_steps() -> list[str]:
    """40 steps whose time is exactly linear in prefill, decode and KV tokens."""
    rows = ["prefill_tokens,decode_tokens,kv_tokens,seconds"]
    for i in range(1, 41):
        p, d, kv = (i * 97) % 4096, (i * 13) % 128, (i * 7919) % 200_000
        rows.append(f"{p},{d},{kv},{0.004 + 2e-5 * p + 1e-4 * d + 3e-8 * kv:.9f}")
    return rows


def test_calibrate_fits_and_bench_accepts_the_profile(tmp_path: Path) -> None:
    (tmp_path / "steps.csv").write_text("\n".join(linear_steps()) + "\n")
    proc = schedkit("calibrate", str(tmp_path / "steps.csv"), "--out", str(tmp_path / "cost.json"))
    assert proc.returncode == 0, proc.stderr
    assert "fitted 28 steps of steps.csv, tested on the next 12" in proc.stdout
    assert "held-out all" in proc.stdout and "MAPE  0.00%" in proc.stdout
    # no attn_pairs column: c_attn is not fitted, and the warning says so
    assert "attn_pairs never varies" in proc.stderr
    profile = json.loads((tmp_path / "cost.json").read_text())
    assert profile["kind"] == "linear" and profile["c_prefill"] == pytest.approx(2e-5, rel=1e-3)
    assert profile["fit"]["holdout"]["all"]["n"] == 12
    results = bench(
        tmp_path / "out", "--workload", SMALL, "--policy", "fcfs",
        "--profile", str(tmp_path / "cost.json"),
    )  # fmt: skip
    assert results["engine"]["cost_model"]["kind"] == "linear"


@pytest.mark.parametrize(
    ("model", "gpu", "reference", "note"),
    [
        ("meta-llama/Meta-Llama-3-70B", "NVIDIA A100-SXM4-80GB", ("Llama-3-70B", "A100-80GB"), ""),
        ("Qwen/Qwen2.5-7B", "cpu", ("Qwen2.5-7B", "H100-SXM"), "recorded on a CPU"),
        ("org/Unknown-1B", "NVIDIA L4", ("Llama-3-8B", "H100-SXM"), "'NVIDIA L4', which no GPU"),
    ],
)
def test_calibrate_takes_its_reference_from_the_engines_names(
    tmp_path: Path, model: str, gpu: str, reference: tuple[str, str], note: str
) -> None:
    from schedkit.sim.cost.model import RooflineCostModel
    from schedkit.sim.cost.profiles import get_gpu, get_model

    meta = json.dumps({"engine": "vllm", "model": model, "gpu": gpu, "tp": 4})
    (tmp_path / "steps.csv").write_text(f"# schedkit-steps {meta}\n" + "\n".join(linear_steps()))
    proc = schedkit("calibrate", str(tmp_path / "steps.csv"), "--out", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    # no attn_pairs column: c_attn cannot be fitted and is the reference's, set by model and GPU
    roofline = RooflineCostModel(get_model(reference[0]), get_gpu(reference[1]), 4)
    profile = json.loads((tmp_path / "c.json").read_text())
    assert profile["c_attn"] == pytest.approx(roofline.linear_coefficients()["c_attn"])
    assert profile["recorded_for"]["model"] == model
    if note:
        assert note in proc.stderr
        assert f"is {reference[0]} on {reference[1]}: pass --model/--gpu" in proc.stderr
    else:
        assert "note:" not in proc.stderr


def test_policies_json_lists_builtins_with_hooks() -> None:
    proc = schedkit("policies", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["fcfs"]["hooks"] == [] and rows["fcfs"]["distribution"] == "schedkit"
    assert rows["priority"]["hooks"] == ["waiting_key", "victim_key"]
    assert rows["priority"]["options_schema"]["type"] == "object"


def test_policies_reports_a_broken_plugin_and_lists_the_rest(tmp_path: Path) -> None:
    env = install_fake_plugin(
        tmp_path, "broken", "broken_policy", "raise ImportError('missing dep')\n"
    )
    proc = schedkit("policies", "--json", env=env)
    assert proc.returncode == 0
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert "schedkit-broken_policy" in rows["broken"]["error"]
    assert "missing dep" in proc.stderr
    assert rows["priority"]["hooks"]


def test_no_mixed_prefill_runs_sglangs_schedule_and_records_it(tmp_path: Path) -> None:
    # SGLang's batches pause every decode for each prefill-only step: TPOT grows.
    args = ("--workload", "poisson:rate=20,n=60,prompt=512,output=64,seed=3", "--policy", "fcfs")
    mixed = bench(tmp_path / "mixed", *args)
    unmixed = bench(tmp_path / "unmixed", *args, "--no-mixed-prefill")
    assert (mixed["engine"]["mixed_prefill"], unmixed["engine"]["mixed_prefill"]) == (True, False)
    tpot = [r["arms"][0]["metrics"]["tpot_ms"]["p50"] for r in (mixed, unmixed)]
    assert tpot[1] > tpot[0]
