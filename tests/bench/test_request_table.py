"""Each request's latencies computed once, as columns (``RequestTable``), give every output
the same numbers as the per-record definitions (``latencies_ms``, ``meets_slo``,
``wait_s``) and the per-record loops the outputs were written with before (issue #40):
on a simulated run with rejections, preemptions, replicas, priority classes and
per-request SLOs (some requests then made unfinished, aborted, failed or one token
long), and on generated records."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import stdtrit

from schedkit.bench.output import REQUEST_COLUMNS, request_rows
from schedkit.bench.report.plots import (
    SCATTER_POINTS,
    SCATTER_SLOWEST,
    THROUGHPUT_BINS,
    throughput_series,
    tpot_ccdf,
    ttft_ccdf,
    ttft_vs_prompt,
)
from schedkit.bench.report.svg import ccdf_points, line_chart, scatter_chart
from schedkit.bench.report.vllm_format import dumps_indented, vllm_bench_result
from schedkit.bench.results import Results
from schedkit.bench.runner import Bench, BenchSpec, _workload_summary
from schedkit.bench.stats.flags import overload
from schedkit.bench.stats.metrics import (
    LATENCIES,
    is_completed,
    latencies_ms,
    meets_slo,
    per_request_samples,
    slo_applies,
)
from schedkit.bench.stats.paired import wait_s, waits_s
from schedkit.bench.stats.request_table import RequestTable, nullable
from schedkit.bench.stats.sectioning import _T_95, t_quantile
from schedkit.records import RequestRecord, RunResult

SLOS = [(None, None), (1500.0, None), (None, 80.0), (1500.0, 80.0), (0.0, 0.0)]


def _simulated() -> RunResult:
    """Two replicas, few KV blocks (rejections and preemptions), two priority classes
    with their own SLOs; then some requests cut short as a live engine leaves them."""
    spec = BenchSpec(
        workload="two-class", policies=["fcfs"], max_requests=300, kv_blocks=120, replicas=2
    )
    run = Bench(spec).run_arm(0, 1.0)
    assert {r.finish_reason for r in run.records} == {"length", "rejected"}
    assert sum(r.preemptions for r in run.records) > 0 and run.routed
    done = [i for i, r in enumerate(run.records) if is_completed(r)]
    records = list(run.records)
    for i in done[:5]:  # still running when the run ended
        records[i] = dataclasses.replace(records[i], finish_reason="", finish_s=None)
    for i in done[5:8]:  # failed, or aborted while waiting
        records[i] = dataclasses.replace(records[i], finish_reason="error", reject_reason="500")
    for i in done[8:10]:
        records[i] = dataclasses.replace(
            records[i], finish_reason="aborted", scheduled_s=None, first_token_s=None
        )
    for i in done[10:14]:  # one output token: no TPOT
        records[i] = dataclasses.replace(records[i], output_tokens=1)
    records[done[14]] = dataclasses.replace(records[done[14]], first_token_s=None)
    return dataclasses.replace(run, records=records)


@pytest.fixture(scope="module")
def simulated() -> RunResult:
    return _simulated()


def _check_table(records: Sequence[RequestRecord], end_s: float) -> None:
    table = RequestTable.of(records)
    for key in LATENCIES:
        assert nullable(table.latency(key)) == [latencies_ms(r)[key] for r in records], key
    for ttft, tpot in SLOS:
        assert table.slo_applies(ttft, tpot) == slo_applies(records, ttft, tpot)
        expected = [meets_slo(r, ttft, tpot) for r in records]
        assert table.met_slo(ttft, tpot).tolist() == expected, (ttft, tpot)
    assert waits_s(table, end_s).tolist() == [wait_s(r, end_s) for r in records]
    assert table.completed.tolist() == [is_completed(r) for r in records]
    assert table.rejected.tolist() == [r.rejected for r in records]


def test_table_equals_the_per_record_definitions(simulated: RunResult) -> None:
    _check_table(simulated.records, simulated.duration_s)
    rows = np.array([0, 3, 17, 2], dtype=np.intp)
    part = RequestTable.of(simulated).take(rows)
    assert part.records == [simulated.records[i] for i in rows]
    assert np.array_equal(part.ttft_ms, RequestTable.of(part.records).ttft_ms, equal_nan=True)


_TIME = st.one_of(st.none(), st.floats(0.0, 50.0))
_TARGET = st.one_of(st.none(), st.floats(0.0, 3000.0), st.just(math.nan))


@st.composite
def _record(draw: st.DrawFn) -> RequestRecord:
    return RequestRecord(
        request_id=str(draw(st.integers(0, 5))),
        tenant=draw(st.sampled_from(["a", "b"])),
        priority=draw(st.integers(0, 2)),
        arrival_s=draw(st.one_of(st.floats(0.0, 20.0), st.integers(0, 20))),
        prompt_tokens=draw(st.integers(1, 4000)),
        max_tokens=draw(st.integers(1, 500)),
        slo_ttft_ms=draw(_TARGET),
        slo_tpot_ms=draw(_TARGET),
        output_tokens=draw(st.integers(0, 500)),
        finish_reason=draw(st.sampled_from(["length", "stop", "rejected", "aborted", "error", ""])),
        scheduled_s=draw(_TIME),
        first_token_s=draw(_TIME),
        finish_s=draw(_TIME),
        cached_tokens=draw(st.integers(0, 64)),
        preemptions=draw(st.integers(0, 2)),
        recomputed_tokens=draw(st.integers(0, 64)),
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(_record(), max_size=30), st.floats(0.0, 60.0))
def test_table_equals_the_per_record_definitions_on_any_records(
    records: list[RequestRecord], end_s: float
) -> None:
    _check_table(records, end_s)


# ---------------------------------------------------------------------------
# the outputs, against the per-record loops they were written with
# ---------------------------------------------------------------------------


def _rows_per_record(run: RunResult, ttft: float | None, tpot: float | None) -> list[list[Any]]:
    applies = slo_applies(run.records, ttft, tpot)
    rows = []
    for r in run.records:
        row = {
            "arm": run.policy, **dataclasses.asdict(r), **latencies_ms(r),
            "outcome": r.finish_reason or "unfinished",
            "met_slo": meets_slo(r, ttft, tpot) if applies else None,
        }  # fmt: skip
        rows.append([row[c] for c in REQUEST_COLUMNS])
    return rows


@pytest.mark.parametrize(("ttft", "tpot"), SLOS)
def test_request_file_rows(simulated: RunResult, ttft: float | None, tpot: float | None) -> None:
    runs = [simulated, dataclasses.replace(simulated, policy="other")]
    table = request_rows(runs, slo_ttft_ms=ttft, slo_tpot_ms=tpot)
    got = [list(row) for row in zip(*(table[c] for c in REQUEST_COLUMNS), strict=True)]
    assert got == [row for run in runs for row in _rows_per_record(run, ttft, tpot)]
    samples = per_request_samples(simulated, slo_ttft_ms=ttft, slo_tpot_ms=tpot)
    applies = slo_applies(simulated.records, ttft, tpot)
    assert samples["met_slo"] == [
        float(meets_slo(r, ttft, tpot)) if applies else None for r in simulated.records
    ]


def test_vllm_format_per_request_lists(simulated: RunResult) -> None:
    results = Results.model_construct(provenance=_Stub(spec={}), engine={}, workload=_Stub())
    out = vllm_bench_result(simulated, results, slo_ttft_ms=1500.0, slo_tpot_ms=80.0)
    records = simulated.records
    lats = [latencies_ms(r) for r in records]
    assert out["ttfts"] == [(lat["ttft_ms"] or 0.0) / 1e3 for lat in lats]
    assert out["latencies"] == [(lat["e2e_ms"] or 0.0) / 1e3 for lat in lats]
    assert out["output_lens"] == [r.output_tokens if is_completed(r) else 0 for r in records]
    assert out["errors"] == [
        "" if is_completed(r) else (r.reject_reason or r.finish_reason or "unfinished")
        for r in records
    ]
    met = sum(meets_slo(r, 1500.0, 80.0) for r in records)
    assert out["request_goodput"] == met / simulated.duration_s


@dataclasses.dataclass
class _Stub:
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    name: str = "w"
    all_at_once: bool = False
    max_concurrency: int | None = None


def _throughput_per_record(runs: Sequence[RunResult]) -> list[list[tuple[float, float]]]:
    """The report's throughput series as a loop over the records computed it."""
    end = max(r.duration_s for r in runs)
    width, last = end / THROUGHPUT_BINS, THROUGHPUT_BINS - 1
    series = []
    for run in runs:
        tokens = [0.0] * THROUGHPUT_BINS
        for r in run.records:
            first, finish = r.first_token_s, r.finish_s
            if r.output_tokens <= 0 or first is None:
                continue
            tokens[min(int(first / width), last)] += 1.0
            rest = r.output_tokens - 1
            if rest <= 0:
                continue
            if finish is None or finish <= first:
                tokens[min(int((finish or first) / width), last)] += rest
                continue
            rate = rest / (finish - first)
            for b in range(min(int(first / width), last), min(int(finish / width), last) + 1):
                lo = max(first, b * width)
                hi = finish if b == last else min(finish, (b + 1) * width)
                tokens[b] += rate * max(hi - lo, 0.0)
        series.append([((b + 0.5) * width, t / width) for b, t in enumerate(tokens)])
    return series


def _scatter_per_record(runs: Sequence[RunResult]) -> str:
    """The TTFT-vs-prompt plot's points as a loop over the records picked them."""
    base = runs[0].records
    ids = {r.request_id for r in base[:: max(1, math.ceil(len(base) / SCATTER_POINTS))]}
    series: list[tuple[str, Sequence[tuple[float, float]]]] = []
    for run in runs:
        lats = [latencies_ms(r)["ttft_ms"] for r in run.records]
        ttfts = [(i, t) for i, t in enumerate(lats) if t is not None]
        slowest = {i for i, _ in sorted(ttfts, key=lambda p: p[1])[-SCATTER_SLOWEST:]}
        points = [
            (float(run.records[i].prompt_tokens), t)
            for i, t in ttfts
            if i in slowest or run.records[i].request_id in ids
        ]
        series.append((run.policy, points))
    return scatter_chart(
        series, title="TTFT vs prompt length", x_label="prompt (tokens)", y_label="TTFT (ms)",
        log_x=True, log_y=True,
    )  # fmt: skip


def test_report_figures(simulated: RunResult) -> None:
    other = dataclasses.replace(simulated, policy="other", records=simulated.records[::-1])
    runs = [simulated, other]
    got = [points for _, points in throughput_series(runs)]
    assert got == _throughput_per_record(runs)  # every bin's float sum, not close to it
    assert ttft_vs_prompt(runs).svg == _scatter_per_record(runs)
    for key, figure in (("ttft_ms", ttft_ccdf(runs, None)), ("tpot_ms", tpot_ccdf(runs))):
        series = [
            (
                run.policy,
                ccdf_points(v for r in run.records if (v := latencies_ms(r)[key]) is not None),
            )
            for run in runs
        ]
        assert _polylines(figure.svg) == _polylines(line_chart(series, title="", x_label="",
                                                               y_label="", log_x=True,
                                                               log_y=True))  # fmt: skip


def _polylines(svg: str) -> list[str]:
    return [line for line in svg.splitlines() if line.startswith("<polyline")]


def test_overload_backlog(simulated: RunResult) -> None:
    flag = overload(dataclasses.replace(simulated, policy="x"))
    records = simulated.records
    first, last = min(r.arrival_s for r in records), max(r.arrival_s for r in records)

    def backlog(t: float) -> int:
        left = [
            r.finish_s if r.finish_s is not None else (r.arrival_s if r.rejected else None)
            for r in records
        ]
        return sum(
            r.arrival_s <= t and (end is None or end > t)
            for r, end in zip(records, left, strict=True)
        )

    counts = [backlog(first + (last - first) * f) for f in (0.5, 0.75, 1.0)]
    assert flag is not None and flag["backlog"] == counts  # the run's backlog grows
    ttfts = [v for r in records if (v := latencies_ms(r)["ttft_ms"]) is not None]
    assert f"p50 TTFT {np.median(ttfts) / 1000:,.1f} s" in flag["message"]


# ---------------------------------------------------------------------------
# the files' text, and the t quantiles
# ---------------------------------------------------------------------------

_SCALAR = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.booleans(),
    st.none(),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        _VALUE
        | st.lists(st.floats(), min_size=1)
        | st.lists(st.integers(), min_size=1)
        | st.lists(st.text(max_size=8), min_size=1)
        | st.lists(st.just([]), min_size=1),
    )
)
def test_vllm_files_are_json_indented_by_one(data: dict[str, Any]) -> None:
    assert dumps_indented(data) == json.dumps(data, indent=1)


def test_t_quantiles_are_scipys() -> None:
    for df, value in _T_95.items():
        assert value == pytest.approx(float(stdtrit(df, 0.975)), rel=1e-12)
        assert t_quantile(0.95, df) == value
    assert t_quantile(0.9, 4) == pytest.approx(float(stdtrit(4, 0.95)), rel=1e-12)


def test_workload_summary_at_a_rate_scale() -> None:
    bench = Bench(BenchSpec(workload="two-class", policies=["fcfs"], max_requests=200))
    for scale in (1.0, 0.3, 4.0, 7.0):
        assert _workload_summary(bench.base, scale) == bench.workload(scale).summary()
