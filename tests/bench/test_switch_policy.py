"""``bench-switch-sjf`` (benchmarks/fidelity/site): the policy that lets
``benchmarks/fidelity/same_engine.py`` run both A/B arms in one engine. Its figures are
only an A/B if each segment runs exactly as the plain arm would: FCFS on ``fcfs``
segments, sjf on ``sjf`` segments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.workload import load_workload

SITE = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "site"
ORDER = ["fcfs", "sjf", "sjf", "fcfs"]
# bursty arrivals into 4 sequences a step, so that the waiting order matters
WORKLOAD = "gamma:rate=400,cv=2,n=120,prompt=512,output=64,seed=3"


def ttfts(out: Path, arm: str) -> dict[str, float]:
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "requests.parquet").to_pylist()
    return {r["request_id"]: r["ttft_ms"] for r in rows if r["arm"] == arm}


def test_each_segment_runs_as_its_plain_arm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(SITE))  # its entry point: bench-switch-sjf
    base = load_workload(WORKLOAD)
    gap = base.requests[-1].arrival_s + 30.0  # every segment drains before the next
    lines = [json.dumps({"workload": {"name": "segments", "source": WORKLOAD}})]
    for k, policy in enumerate(ORDER):
        lines += [json.dumps({"request_id": f"{policy}{k}-{r.request_id}",
                              "arrival_s": k * gap + r.arrival_s, "prompt_tokens": r.prompt_tokens,
                              "output_tokens": r.output_tokens}) for r in base.requests]  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    spec = BenchSpec(workload=str(trace), policies=["bench-switch-sjf", "fcfs", "sjf"],
                     max_num_seqs=4, jobs=1)  # fmt: skip
    run_bench(spec, tmp_path / "out")
    switched, fcfs, sjf = (ttfts(tmp_path / "out", a) for a in ("bench-switch-sjf", "fcfs", "sjf"))
    for k, policy in enumerate(ORDER):
        ids = [i for i in switched if i.startswith(f"{policy}{k}-")]
        assert len(ids) == len(base.requests)
        plain = fcfs if policy == "fcfs" else sjf
        assert [switched[i] for i in ids] == pytest.approx([plain[i] for i in ids])
        # the two orders differ here, so the check above tells them apart
        assert [fcfs[i] for i in ids] != pytest.approx([sjf[i] for i in ids])
