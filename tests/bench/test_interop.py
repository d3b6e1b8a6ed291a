"""Other load generators on schedkit's workloads (schedkit export: a Mooncake trace, as
aiperf replays it), and their per-request results back in a paired comparison
(--engine import: aiperf's profile_export.jsonl, vllm bench serve's result JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schedkit.bench.engines.interop import export_mooncake
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.errors import SchedkitError
from schedkit.workload import load_workload

WORKLOAD = "two-tenant-flood"
N = 200


def test_export_reads_back_as_the_same_workload(tmp_path: Path) -> None:
    for name in ("mooncake-conv", "poisson:rate=5,n=50,prompt=700,output=30"):
        original = load_workload(name, max_requests=60)
        path = tmp_path / f"{abs(hash(name))}.jsonl"
        assert export_mooncake(original, path) == len(original.requests)
        first = json.loads(path.read_text().splitlines()[0])
        assert set(first) == {"timestamp", "input_length", "output_length", "hash_ids"}
        back = load_workload(str(path))
        start = original.requests[0].arrival_s  # a trace's arrivals count from its first
        for a, b in zip(original.requests, back.requests, strict=True):
            assert (a.prompt_tokens, a.output_tokens) == (b.prompt_tokens, b.output_tokens)
            assert b.arrival_s == pytest.approx(a.arrival_s - start, abs=1e-3)
        if original.hash_block_tokens == 512:
            assert [r.hash_ids for r in back.requests] == [
                r.hash_ids[: len(b.hash_ids)]
                for r, b in zip(original.requests, back.requests, strict=True)
            ]
        else:  # no shared prefix: every block its own
            ids = [h for r in back.requests for h in r.hash_ids]
            assert len(ids) == len(set(ids))


def test_smaller_blocks_are_shared_in_512_token_blocks_only_when_whole(tmp_path: Path) -> None:
    trace = tmp_path / "small.jsonl"
    rows: list[dict[str, object]] = [{"workload": {"name": "small", "hash_block_tokens": 256}}]
    rows += [  # 1,024 tokens each: two 512-token blocks of two 256-token hashes each
        {"arrival_s": 0.0, "prompt_tokens": 1024, "output_tokens": 4, "hash_ids": [1, 2, 3, 4]},
        {"arrival_s": 1.0, "prompt_tokens": 1024, "output_tokens": 4, "hash_ids": [1, 2, 3, 9]},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "mooncake.jsonl"
    export_mooncake(load_workload(str(trace)), out)
    a, b = (json.loads(line)["hash_ids"] for line in out.read_text().splitlines())
    assert a[0] == b[0] and a[1] != b[1]


def arms(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    spec = BenchSpec(workload=WORKLOAD, max_requests=N, policies=["fcfs", "vtc"], rate_scale=3.0,
                     kv_blocks=800, slo_ttft_ms=2000)  # fmt: skip
    return run_bench(spec, tmp_path / "sim").to_json(), tmp_path / "sim"


def test_vllm_bench_results_come_back_as_the_same_paired_comparison(tmp_path: Path) -> None:
    sim, out = arms(tmp_path)
    files = [str(out / "vllm-bench-0-fcfs.json"), str(out / "vllm-bench-1-vtc.json")]
    spec = BenchSpec(workload=WORKLOAD, max_requests=N, policies=["fcfs", "vtc"],
                     rate_scale=3.0, engine="import", targets=files, slo_ttft_ms=2000)  # fmt: skip
    back = run_bench(spec, tmp_path / "imported")
    for a, b in zip(sim["arms"], back["arms"], strict=True):
        ma, mb = a["metrics"], b["metrics"]
        assert mb["completed"] == ma["completed"] and mb["failed"] == N - ma["completed"]
        for key in ("ttft_ms", "e2e_ms"):
            assert mb[key]["p50"] == pytest.approx(ma[key]["p50"], rel=1e-6), key
            assert mb[key]["p90"] == pytest.approx(ma[key]["p90"], rel=1e-6), key
        assert mb["slo_attainment"] == pytest.approx(ma["slo_attainment"])
    assert back["engine"]["imported"] == {"fcfs": files[0], "vtc": files[1]}
    verdict = {m["metric"]: m["rel"] for m in back["comparisons"][0]["metrics"]}
    original = {m["metric"]: m["rel"] for m in sim["comparisons"][0]["metrics"]}
    assert verdict["ttft_p90_ms"] == pytest.approx(original["ttft_p90_ms"], rel=1e-6)


def test_aiperf_records_come_back_matched_by_session(tmp_path: Path) -> None:
    sim, out = arms(tmp_path)
    table = json.loads((out / "vllm-bench-0-fcfs.json").read_text())
    lines = []
    for i in reversed(range(N)):  # aiperf writes records as they finish, not in order
        if table["errors"][i]:
            record = {
                "metadata": {"session_num": i},
                "metrics": {"error_isl": {"value": table["input_lens"][i], "unit": "tokens"}},
                "error": {"code": 503, "type": "HTTPError", "message": table["errors"][i]},
            }
        else:
            record = {
                "metadata": {"session_num": i},
                "error": None,
                "metrics": {
                    "input_sequence_length": {"value": table["input_lens"][i], "unit": "tokens"},
                    "output_sequence_length": {"value": table["output_lens"][i], "unit": "tokens"},
                    "time_to_first_token": {"value": table["ttfts"][i] * 1e3, "unit": "ms"},
                    "request_latency": {"value": table["latencies"][i] * 1e3, "unit": "ms"},
                },
            }
        lines.append(json.dumps(record))  # fmt: skip
    export = tmp_path / "profile_export.jsonl"
    export.write_text("\n".join(lines) + "\n")
    spec = BenchSpec(workload=WORKLOAD, max_requests=N, policies=["fcfs"], rate_scale=3.0,
                     engine="import", targets=[str(export)])  # fmt: skip
    m = run_bench(spec, tmp_path / "aiperf")["arms"][0]["metrics"]
    assert m["ttft_ms"]["p90"] == pytest.approx(sim["arms"][0]["metrics"]["ttft_ms"]["p90"])
    assert m["completed"] == sim["arms"][0]["metrics"]["completed"]


def test_another_request_stream_is_refused(tmp_path: Path) -> None:
    _, out = arms(tmp_path)
    path = out / "vllm-bench-0-fcfs.json"
    data = json.loads(path.read_text())
    data["input_lens"][7] += 1
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    spec: dict[str, Any] = dict(
        workload=WORKLOAD, max_requests=N, policies=["fcfs"], rate_scale=3.0, engine="import"
    )
    with pytest.raises(SchedkitError, match=r"request 7 has a .*-token prompt"):
        run_bench(BenchSpec(**spec, targets=[str(wrong)]), tmp_path / "w")
    with pytest.raises(SchedkitError, match="has 200 requests, the workload 100"):
        run_bench(BenchSpec(**{**spec, "max_requests": 100}, targets=[str(path)]), tmp_path / "x")
    with pytest.raises(SchedkitError, match="is not a file"):
        run_bench(BenchSpec(**spec, targets=[str(tmp_path / "nope.json")]), tmp_path / "y")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(SchedkitError, match="neither an aiperf"):
        run_bench(BenchSpec(**spec, targets=[str(tmp_path / "other.json")]), tmp_path / "z")


def test_the_export_command(tmp_path: Path) -> None:
    out = tmp_path / "flood.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "export", WORKLOAD, str(out), "--max-requests", "20"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "wrote 20 requests" in proc.stdout and len(out.read_text().splitlines()) == 20


# guidellm 0.8.1 replaying `schedkit export` output (tests/bench/data/guidellm-arm*.json):
#   schedkit export "poisson:rate=20,n=12,prompt=64,output=8" trace.jsonl
#   guidellm run --backend kind=openai_http,target=URL,model=stub,request_format=/v1/completions,\
#       validate_backend=false --profile kind=replay --tokenizer kind=huggingface_auto,model=TOK \
#       --data kind=mooncake,source.kind=json_file,source.path=trace.jsonl,time_scale=0.001 \
#       --output kind=json,path=armN.json
# against schedkit.testing.openai_stub (1 ms between tokens for arm 1, 4 ms for arm 2), with a
# small byte-level BPE tokenizer trained offline; the files keep the fields schedkit reads.
GUIDELLM_WORKLOAD = "poisson:rate=20,n=12,prompt=64,output=8"
DATA = Path(__file__).parent / "data"


def guidellm_spec(*targets: Path, **extra: object) -> BenchSpec:
    policies = ["fcfs", "priority"][: len(targets)]
    return BenchSpec(workload=GUIDELLM_WORKLOAD, policies=policies, engine="import",
                     targets=[str(t) for t in targets], **extra)  # fmt: skip


def test_guidellm_replays_come_back_as_a_paired_comparison(tmp_path: Path) -> None:
    files = [DATA / "guidellm-arm1.json", DATA / "guidellm-arm2.json"]
    results = run_bench(guidellm_spec(*files), tmp_path)
    for arm, path in zip(results["arms"], files, strict=True):
        records = json.loads(path.read_text())["benchmarks"][0]["requests"]["successful"]
        m = arm["metrics"]
        assert m["completed"] == len(records) == 12 and m["failed"] == 0
        ttfts = sorted(r["time_to_first_token_ms"] for r in records)
        assert m["ttft_ms"]["p50"] == pytest.approx((ttfts[5] + ttfts[6]) / 2, rel=1e-6)
        assert m["output_tokens"] == sum(r["output_tokens"] for r in records)
    comparison = {c["metric"]: c for c in results["comparisons"][0]["metrics"]}
    # arm 2's server waits 4 ms between tokens, arm 1's 1 ms: the verdict sees it
    assert comparison["tpot_p50_ms"]["rel"] > 1.0 and comparison["e2e_p90_ms"]["rel"] > 0


def test_a_guidellm_file_of_another_stream_or_shape_is_refused(tmp_path: Path) -> None:
    data = json.loads((DATA / "guidellm-arm1.json").read_text())
    for record in data["benchmarks"][0]["requests"]["successful"]:  # seconds read as ms
        record["info"]["settings"]["relative_timestamp"] *= 1000
    wrong = tmp_path / "ms.json"
    wrong.write_text(json.dumps(data))
    with pytest.raises(SchedkitError, match=r"request 1 was sent .* time_scale=0\.001"):
        run_bench(guidellm_spec(wrong), tmp_path / "a")
    two = {"benchmarks": [data["benchmarks"][0]] * 2}
    (tmp_path / "two.json").write_text(json.dumps(two))
    with pytest.raises(SchedkitError, match=r"with 2 benchmarks.*kind=replay"):
        run_bench(guidellm_spec(tmp_path / "two.json"), tmp_path / "b")


def test_guidellm_errored_requests_are_failures_with_their_reason(tmp_path: Path) -> None:
    # The arm-1 file with its last two requests moved to "errored", as guidellm lists a
    # request its server answered with an error (info.error: the message).
    data = json.loads((DATA / "guidellm-arm1.json").read_text())
    requests = data["benchmarks"][0]["requests"]
    ordered = sorted(
        requests["successful"], key=lambda r: r["info"]["settings"]["relative_timestamp"]
    )
    for record in ordered[-2:]:
        requests["successful"].remove(record)
        record["info"]["error"] = "HTTP 503: rejected: tenant over quota"
    requests["errored"] = ordered[-2:]
    path = tmp_path / "errored.json"
    path.write_text(json.dumps(data))
    m = run_bench(guidellm_spec(path), tmp_path / "out")["arms"][0]["metrics"]
    assert m["completed"] == 10 and m["failed"] == 2
    assert m["errors"] == {"HTTP 503: rejected: tenant over quota": 2}
