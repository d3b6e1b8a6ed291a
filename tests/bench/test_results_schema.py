"""What a bench run writes: documented keys (docs/results.md), per-request rows, provenance,
all-or-nothing writes, --window / --max-requests / --strict, as a user runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_bench_cli import install_fake_plugin, schedkit

from schedkit.bench import output
from schedkit.bench.output import REQUEST_COLUMNS, request_rows, write_requests
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.errors import SchedkitError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results.md"

FAULTY = """
from schedkit import Policy, hookimpl

class Plugin(Policy):
    name = "faulty"

    @hookimpl
    def order_waiting(self, waiting, engine):
        raise RuntimeError("boom")
"""


def documented() -> dict[str, set[str]]:
    """Section title -> the keys in the first column of its table."""
    parts = re.split(r"^## +(.+?) *$", DOCS.read_text(), flags=re.MULTILINE)
    return {
        title: set(re.findall(r"^\| `([^`]+)` \|", body, flags=re.MULTILINE))
        for title, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def _trace(path: Path) -> Path:
    """A quiet first minute (1 req/s, two tenants), then a burst of 10 req/s."""
    rows: list[dict[str, float | str]] = [
        {"arrival_s": float(i), "prompt_tokens": 400, "output_tokens": 40} for i in range(60)
    ]
    rows += [
        {"arrival_s": 60.0 + i / 10, "prompt_tokens": 400, "output_tokens": 40} for i in range(300)
    ]
    for i, row in enumerate(rows):
        row["tenant"] = "a" if i % 2 else "b"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("results")
    env = install_fake_plugin(root / "plugin", "faulty", "faulty_policy", FAULTY)
    out = root / "out"
    proc = schedkit(
        "bench", "--workload", str(_trace(root / "trace.jsonl")), "--policy", "fcfs",
        "--policy", "faulty", "--max-requests", "60", "--slo-ttft-ms", "500",
        "--kv-blocks", "2000", "--strict", "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # --strict: the policy faulted
    return out, json.loads((out / "results.json").read_text())


def test_every_key_written_is_documented(run: tuple[Path, dict[str, Any]]) -> None:
    _, results = run
    docs = documented()
    assert set(results) == docs["results.json"]
    assert set(results["provenance"]) == docs["provenance"]
    # keys only a load mode writes (tests/bench/test_load_modes.py)
    assert set(results["workload"]) == docs["workload"] - {"all_at_once", "max_concurrency"}
    for arm in results["arms"]:
        assert set(arm) == {"policy", "config", "engine_settings", "engine", "metrics"}
        assert arm["engine_settings"] == {} and arm["engine"] is None  # --policy arms
        assert set(arm["metrics"]) <= docs["arms[].metrics"]
    flags = results["flags"] + [f for c in results["comparisons"] for f in c["flags"]]
    assert {f["kind"] for f in flags} >= {"policy_errors", "truncated"}
    for flag in flags:
        assert set(flag) <= docs["flags[] and comparisons[].flags[]"], flag["kind"]
    (comparison,) = results["comparisons"]
    assert set(comparison) == docs["comparisons[]"]
    for row in comparison["metrics"]:
        assert set(row) == docs["comparisons[].metrics[]"]
    assert set(REQUEST_COLUMNS) == docs["requests.parquet"]


def test_provenance_and_flags_of_the_run(run: tuple[Path, dict[str, Any]]) -> None:
    _, results = run
    prov = results["provenance"]
    assert results["schema_version"] == 3
    assert prov["command"][:2] == ["__main__.py", "bench"] or prov["command"][1] == "bench"
    assert prov["spec"]["workload"]["max_requests"] == 60 and prov["schedkit_version"]
    assert "/" not in prov["command"][0]  # no directory of this machine
    (truncated,) = [f for f in results["flags"] if f["kind"] == "truncated"]
    assert truncated["suggested_window"][0] == pytest.approx(60, abs=1)
    assert "--window 60:" in truncated["message"]
    (faulty,) = [f for f in results["flags"] if f["kind"] == "policy_errors"]
    assert faulty["policy"] == "faulty" and faulty["by_hook"]["faulty.order_waiting"] > 0
    tenants = {row["metric"] for row in results["comparisons"][0]["metrics"]}
    assert {"tenant:a:ttft_p90_ms", "tenant:b:ttft_p90_ms"} <= tenants


def test_requests_parquet_has_every_request_of_every_arm(run: tuple[Path, dict[str, Any]]) -> None:
    out, results = run
    table = pq.read_table(out / "requests.parquet").to_pydict()
    assert list(table) == list(REQUEST_COLUMNS)
    assert len(table["arm"]) == 2 * 60
    assert set(table["arm"]) == {"fcfs", "faulty"}
    fcfs = [i for i, arm in enumerate(table["arm"]) if arm == "fcfs"]
    ttft = [table["ttft_ms"][i] for i in fcfs]
    done = [t for t in ttft if t is not None]
    assert len(done) == results["arms"][0]["metrics"]["completed"]
    assert sorted(done)[len(done) // 2] == pytest.approx(
        results["arms"][0]["metrics"]["ttft_ms"]["p50"], rel=0.05
    )
    assert {table["met_slo"][i] for i in fcfs} <= {True, False}


def test_csv_when_pyarrow_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: tuple[Path, dict[str, Any]]
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    table = {c: ["x", None] for c in REQUEST_COLUMNS}
    path = write_requests(tmp_path, table)
    assert path.name == "requests.csv"
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(REQUEST_COLUMNS) and lines[2] == "," * (len(REQUEST_COLUMNS) - 1)


def test_a_failed_run_leaves_the_previous_results_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = BenchSpec(workload="poisson:rate=20,n=40", policies=["fcfs"], kv_blocks=500)
    run_bench(spec, tmp_path)
    before = (tmp_path / "results.json").read_text()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("schedkit.bench.report.render.write_report", broken)
    with pytest.raises(SchedkitError, match=r"cannot write the results to --out .*disk full"):
        run_bench(spec.replace(seed=1), tmp_path, overwrite=True)
    assert (tmp_path / "results.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "report.html",
        "report.md",
        "requests.parquet",
        "results.json",
        "vllm-bench-0-fcfs.json",
    ]
    assert output  # the module whose staging directory was cleaned up


def test_window_selects_arrivals_and_bad_windows_name_the_range(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path / "trace.jsonl"))
    spec = BenchSpec(workload=trace, policies=["fcfs"], kv_blocks=2000, window=(60.0, 70.0))
    results = run_bench(spec, tmp_path / "out")
    assert results["workload"]["requests"] == 100 and results["workload"]["window_s"] == [60, 70]
    with pytest.raises(
        SchedkitError, match=r"--window 900:1000 holds no request .*0\.0 \.\. 89\.9"
    ):
        run_bench(spec.replace(window=(900.0, 1000.0)), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    proc = schedkit("bench", "--workload", trace, "--policy", "fcfs", "--window", "abc",
                    "--out", str(tmp_path / "y"))  # fmt: skip
    assert proc.returncode != 0 and "--window 'abc' is not START:END" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = schedkit("bench", "--workload", trace, "--policy", "fcfs", "--min-effect", "-1",
                    "--metrics", "ttft_p50_ms", "--out", str(tmp_path / "y"))  # fmt: skip
    assert proc.returncode != 0 and "--min-effect -1.0 is outside 0 .. 1" in proc.stderr
    proc = schedkit("bench", "--workload", trace, "--policy", "fcfs", "--metrics", "p50",
                    "--out", str(tmp_path / "y"))  # fmt: skip
    assert proc.returncode != 0 and "unknown verdict metric 'p50'" in proc.stderr
    assert not (tmp_path / "y").exists()


def test_request_rows_count_outcomes_and_latencies() -> None:
    from schedkit.records import RequestRecord, RunResult

    done = RequestRecord("a", "t", 0, 1.0, 10, 5, output_tokens=5, finish_reason="length")
    done.scheduled_s, done.first_token_s, done.finish_s = 1.5, 2.0, 3.0
    waiting = RequestRecord("b", "t", 0, 2.0, 10, 5)
    rows = request_rows([RunResult("p", [done, waiting], 3.0)], slo_ttft_ms=900.0, slo_tpot_ms=None)
    assert rows["outcome"] == ["length", "unfinished"]
    assert rows["ttft_ms"] == [1000.0, None] and rows["tpot_ms"] == [250.0, None]
    assert rows["queue_ms"] == [500.0, None] and rows["met_slo"] == [False, False]


def test_arms_in_parallel_processes_give_the_same_results(tmp_path: Path) -> None:
    spec = BenchSpec(
        workload="poisson:rate=30,n=300", policies=["fcfs", "shortest-prompt"], kv_blocks=600
    )
    one = run_bench(spec.replace(jobs=1), tmp_path / "one").to_json()
    two = run_bench(spec.replace(jobs=2), tmp_path / "two").to_json()
    for results in (one, two):
        results.pop("provenance")
        for arm in results["arms"]:
            arm["metrics"].pop("wall_s")
    assert one == two
    assert one["arms"][0]["metrics"]["completed"] == 300


SLOW = """
import time
from schedkit import Policy, hookimpl

class Plugin(Policy):
    name = "slow"

    @hookimpl
    def order_waiting(self, waiting):
        time.sleep(0.002)
"""


def test_hook_calls_over_the_configured_budget_are_counted_and_flagged(tmp_path: Path) -> None:
    env = install_fake_plugin(tmp_path / "plugin", "slow", "slow_policy", SLOW)
    config = tmp_path / "slow.toml"
    config.write_text('policy = ["slow"]\nhook_budget_ms = 1\n')
    out = tmp_path / "out"
    proc = schedkit(
        "bench", "--workload", str(_trace(tmp_path / "trace.jsonl")), "--policy", "fcfs",
        "--policy", str(config), "--max-requests", "20", "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    metrics = {arm["policy"]: arm["metrics"] for arm in results["arms"]}
    slow = metrics["slow"]
    assert slow["slow_hook_calls"] > 0
    assert slow["slow_hook_calls_by_hook"] == {"slow.order_waiting": slow["slow_hook_calls"]}
    assert metrics["fcfs"]["slow_hook_calls"] == 0  # no budget set there
    (flag,) = [f for f in results["flags"] if f["kind"] == "slow_hooks"]
    assert flag["policy"] == "slow" and flag["calls"] == slow["slow_hook_calls"]
    docs = documented()
    assert set(flag) <= docs["flags[] and comparisons[].flags[]"]
    assert set(slow) <= docs["arms[].metrics"]
    assert "hook budget" in proc.stdout + proc.stderr


def test_max_requests_reads_a_trace_only_as_far_as_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A week-long trace costs what its start does: with --max-requests the trace is read
    no further than SCAN_REQUESTS rows (a bad row past them is never read)."""
    from schedkit.bench import runner
    from schedkit.bench.runner import Bench

    rows = [{"arrival_s": i / 10, "prompt_tokens": 64, "output_tokens": 8} for i in range(150)]
    lines = [json.dumps(row) for row in rows] + ["{not json"]
    trace = tmp_path / "week.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(runner, "SCAN_REQUESTS", 120)
    bench = Bench(BenchSpec(workload=str(trace), policies=["fcfs"], max_requests=10))
    assert len(bench.base.requests) == 10
    with pytest.raises(SchedkitError, match="line 151"):
        Bench(BenchSpec(workload=str(trace), policies=["fcfs"]))


# results.json's models (schedkit.bench.results) and their generated schema


SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schedkit" / "data" / "results.schema.json"


def test_the_shipped_schema_is_the_one_the_models_generate() -> None:
    from schedkit.bench.results import results_schema

    shipped = json.loads(SCHEMA_FILE.read_text())
    assert shipped == results_schema(), (
        "schedkit/data/results.schema.json is stale: regenerate it with"
        " `.venv/bin/python -m schedkit.bench.results > schedkit/data/results.schema.json`"
    )


def _properties(schema: dict[str, Any], name: str | None = None) -> set[str]:
    part = schema if name is None else schema["$defs"][name]
    return set(part["properties"])


def test_docs_document_every_field_of_the_schema_and_nothing_else() -> None:
    schema, docs = json.loads(SCHEMA_FILE.read_text()), documented()
    assert _properties(schema) == docs["results.json"]
    assert _properties(schema, "Provenance") == docs["provenance"]
    assert _properties(schema, "WorkloadInfo") == docs["workload"]
    assert _properties(schema, "ArmMetrics") == docs["arms[].metrics"]
    assert _properties(schema, "Comparison") == docs["comparisons[]"]
    assert _properties(schema, "MetricRow") == docs["comparisons[].metrics[]"]
    flag = _properties(schema, "Flag")  # kind and message; the rest depends on the kind
    assert flag == {"kind", "message"} and flag <= docs["flags[] and comparisons[].flags[]"]


def test_a_results_file_is_validated_by_its_models(run: tuple[Path, dict[str, Any]]) -> None:
    from pydantic import ValidationError

    from schedkit.bench.results import Results

    _, written = run
    results = Results.model_validate(written)
    assert results.to_json() == written  # the file is the models, nothing more or less
    assert results.arms[1].metrics.policy_errors > 0  # read by attribute, typed
    bad = json.loads(json.dumps(written))
    bad["arms"][0]["metrics"]["ttft_p50"] = 1.0  # a key no model has
    with pytest.raises(ValidationError, match="ttft_p50"):
        Results.model_validate(bad)
