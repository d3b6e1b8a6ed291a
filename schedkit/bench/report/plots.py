"""The bench report's figures: what each plot shows, drawn from the arms' raw results.

Latency plots use the metrics' definitions (:func:`schedkit.bench.stats.metrics.latencies_ms`,
computed once per arm in a :class:`~schedkit.bench.stats.request_table.RequestTable`):
only completed requests have a TTFT, and each caption says how many did not complete.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from schedkit.bench.report.svg import (
    Point,
    bar_chart,
    ccdf_points,
    downsample,
    line_chart,
    scatter_chart,
)
from schedkit.bench.results import ArmMetrics, GroupMetrics, Results
from schedkit.bench.stats.estimators import FloatArray
from schedkit.bench.stats.request_table import IntArray, RequestTable
from schedkit.records import RunResult, TimelinePoint

SCATTER_POINTS = 1200  # requests per arm in the TTFT-vs-prompt scatter
SCATTER_SLOWEST = 30  # each arm's slowest requests, always drawn
THROUGHPUT_BINS = 120


@dataclass(frozen=True)
class Figure:
    """One plot of the report: a stable ``key`` (its HTML id), the SVG and what it shows."""

    key: str
    svg: str
    caption: str


def _ttfts(table: RequestTable) -> tuple[IntArray, FloatArray]:
    """Positions and TTFTs (ms) of the run's completed requests, in record order."""
    positions = np.flatnonzero(~np.isnan(table.ttft_ms))
    return positions, table.ttft_ms[positions]


def _ascending(values: FloatArray) -> list[float]:
    """The samples of ``values`` (NaN: none) in ascending order: numpy sorts them faster
    than ``sorted`` in :func:`ccdf_points`, which then finds them in order."""
    ordered: list[float] = np.sort(values[~np.isnan(values)]).tolist()
    return ordered


def _not_completed(runs: Sequence[RunResult], tables: Sequence[RequestTable]) -> str:
    counts = [
        (r.policy, len(t) - int(np.count_nonzero(t.completed)))
        for r, t in zip(runs, tables, strict=True)
    ]
    missing = [f"{name} {n:,}" for name, n in counts if n]
    return f" Not completed, so not shown: {', '.join(missing)}." if missing else ""


def _tables(runs: Sequence[RunResult], tables: Sequence[RequestTable] | None) -> list[RequestTable]:
    return list(tables) if tables is not None else [RequestTable.of(r) for r in runs]


def ttft_ccdf(
    runs: Sequence[RunResult],
    slo_ttft_ms: float | None,
    tables: Sequence[RequestTable] | None = None,
) -> Figure:
    tables = _tables(runs, tables)
    series = [
        (r.policy, ccdf_points(_ascending(t.ttft_ms))) for r, t in zip(runs, tables, strict=True)
    ]
    refs = [(slo_ttft_ms, f"SLO {slo_ttft_ms:,.0f} ms")] if slo_ttft_ms else []
    svg = line_chart(
        series,
        title="TTFT tail (CCDF)",
        x_label="TTFT (ms)",
        y_label="fraction with TTFT ≥ x",
        log_x=True,
        log_y=True,
        references=refs,
    )
    caption = (
        "Fraction of completed requests that waited at least x for their first token, both "
        "axes logarithmic: a line further right at the bottom is a heavier tail; the lowest "
        "step is the single slowest request." + _not_completed(runs, tables)
    )
    return Figure("ttft-ccdf", svg, caption)


def ttft_vs_prompt(
    runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None
) -> Figure:
    """The starvation picture: TTFT against prompt length, the same requests in every arm."""
    tables = _tables(runs, tables)
    ids: set[str] = set()
    if runs:
        base = runs[0].records
        step = max(1, math.ceil(len(base) / SCATTER_POINTS))
        ids = {r.request_id for r in base[::step]}
    series: list[tuple[str, Sequence[Point]]] = []
    for run, table in zip(runs, tables, strict=True):
        positions, ttfts = _ttfts(table)
        shown = np.array([r.request_id in ids for r in run.records], dtype=np.bool_)
        # the slowest by a stable sort, as sorted() picks them among equal TTFTs
        shown[positions[np.argsort(ttfts, kind="stable")[-SCATTER_SLOWEST:]]] = True
        kept = shown[positions]
        prompts = table.prompt_tokens[positions[kept]].astype(np.float64).tolist()
        series.append((run.policy, list(zip(prompts, ttfts[kept].tolist(), strict=True))))
    svg = scatter_chart(
        series,
        title="TTFT vs prompt length",
        x_label="prompt (tokens)",
        y_label="TTFT (ms)",
        log_x=True,
        log_y=True,
    )
    caption = (
        f"One dot per request: the same sample of at most {SCATTER_POINTS:,} requests in "
        f"every policy, plus each policy's {SCATTER_SLOWEST} slowest. Long prompts pushed "
        "to the top are requests a policy starves." + _not_completed(runs, tables)
    )
    return Figure("ttft-prompt", svg, caption)


GroupKey = Literal["tenants", "priorities"]


def groups_of(metrics: ArmMetrics, key: GroupKey) -> dict[str, GroupMetrics] | None:
    """An arm's per-tenant or per-priority metrics; None when the run has no such split."""
    return metrics.tenants if key == "tenants" else metrics.priorities


def group_ttft(results: Results, key: GroupKey, noun: str) -> Figure | None:
    """TTFT p90 per tenant (``key="tenants"``) or priority, one bar per arm; None with
    fewer than two groups."""
    arms = [
        (arm.policy, groups)
        for arm in results.arms
        if (groups := groups_of(arm.metrics, key)) is not None
    ]
    names = sorted({g for _, groups in arms for g in groups}, key=group_order)
    if len(names) < 2:
        return None

    def p90(groups: Mapping[str, GroupMetrics], name: str) -> float | None:
        return groups[name].ttft_ms.p90 if name in groups else None

    series = [(policy, [p90(groups, n) for n in names]) for policy, groups in arms]
    title = f"TTFT p90 per {noun}"
    svg = bar_chart(names, series, title=title, y_label="TTFT p90 (ms)")
    return Figure(f"ttft-{key}", svg, f"90th-percentile TTFT of each {noun}'s completed requests.")


def group_order(name: str) -> tuple[int, str]:
    """Sort key of tenant or priority names. Priorities are numeric strings: sort "2"
    before "10"; tenants sort by name."""
    return (int(name), "") if name.lstrip("-").isdigit() else (0, name)


def _timeline(
    runs: Sequence[RunResult], value: Callable[[TimelinePoint], float]
) -> list[tuple[str, Sequence[Point]]]:
    return [(r.policy, downsample([(p.t, value(p)) for p in r.timeline])) for r in runs]


def throughput_series(
    runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None
) -> list[tuple[str, Sequence[Point]]]:
    """Output tokens per second in :data:`THROUGHPUT_BINS` bins over the longest arm, at
    the bins' centres. A request's first token counts at its first-token time; the rest,
    which the records do not time one by one, are spread evenly up to its finish."""
    end = max((r.duration_s for r in runs), default=0.0)
    if end <= 0:
        return [(r.policy, []) for r in runs]
    width = end / THROUGHPUT_BINS
    series: list[tuple[str, Sequence[Point]]] = []
    for run, table in zip(runs, _tables(runs, tables), strict=True):
        bins, tokens = _token_events(table, width, THROUGHPUT_BINS - 1)
        per_bin = np.bincount(bins, weights=tokens, minlength=THROUGHPUT_BINS).tolist()
        series.append((run.policy, [((b + 0.5) * width, t / width) for b, t in enumerate(per_bin)]))
    return series


def _token_events(table: RequestTable, width: float, last: int) -> tuple[IntArray, FloatArray]:
    """Each request's output tokens as (bin, tokens) additions, in request order and, within
    a request, its first token, then its other tokens bin by bin (or all in one bin when
    its finish is unknown or not after its first token): ``np.bincount`` sums them in
    this order, so each bin's float sum is the one a loop over the records gives."""
    live = np.flatnonzero((table.output_tokens > 0) & ~np.isnan(table.first_token_s))
    first, finish = table.first_token_s[live], table.finish_s[live]
    rest = table.output_tokens[live] - 1
    first_bin = np.minimum((first / width).astype(np.int64), last)
    spread = (rest > 0) & (finish > first)  # False where the finish is unknown (NaN)
    lump_at = np.where(np.isnan(finish) | (finish == 0.0), first, finish)  # ``finish or first``
    lump_bin = np.minimum((lump_at / width).astype(np.int64), last)
    last_at = np.where(spread, finish, first)  # no NaN to cast
    last_bin = np.minimum((last_at / width).astype(np.int64), last)
    count = 1 + np.where(spread, last_bin - first_bin + 1, rest > 0)
    owner = np.repeat(np.arange(live.size), count)
    step = np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)  # 0: first token
    b = first_bin[owner] + step - 1
    in_spread = (step > 0) & spread[owner]
    bins = np.where(step == 0, first_bin[owner], np.where(in_spread, b, lump_bin[owner]))
    f, g = first[owner], finish[owner]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = rest[owner] / (g - f)
        lo = np.maximum(f, b * width)
        hi = np.where(b == last, g, np.minimum(g, (b + 1) * width))
        spread_tokens = rate * np.maximum(hi - lo, 0.0)
    tokens = np.where(step == 0, 1.0, np.where(in_spread, spread_tokens, rest[owner]))
    return bins, tokens


def throughput(runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None) -> Figure:
    svg = line_chart(
        throughput_series(runs, tables),
        title="Output throughput",
        x_label="time (s)",
        y_label="tokens/s",
    )
    caption = (
        f"Output tokens per second in {THROUGHPUT_BINS} time bins. Records keep no per-token "
        "times, so each request's tokens after the first are spread evenly from its first "
        "token to its finish."
    )
    return Figure("throughput", svg, caption)


def preemptions(runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None) -> Figure:
    """Cumulative preemptions, each request's count placed at its finish: the records say
    how often a request was preempted, not when."""
    series: list[tuple[str, Sequence[Point]]] = []
    for run, table in zip(runs, _tables(runs, tables), strict=True):
        preempted = [run.records[i] for i in np.flatnonzero(table.preemptions).tolist()]
        events = sorted(
            (r.finish_s if r.finish_s is not None else run.duration_s, r.preemptions)
            for r in preempted
        )
        points, total = [(0.0, 0.0)], 0
        for t, n in events:
            total += n
            points.append((t, float(total)))
        points.append((max(run.duration_s, points[-1][0]), float(total)))
        series.append((run.policy, downsample(points) if total else []))
    svg = line_chart(
        series,
        title="Preemptions (cumulative)",
        x_label="time (s)",
        y_label="preemptions so far",
        empty="no preemptions in any arm",
    )
    caption = (
        "Preemptions of the requests finished by time t. A request's preemptions are "
        "counted at its finish (unfinished ones at the end of the run): the bench records "
        "how often a request was preempted, not when."
    )
    return Figure("preemptions", svg, caption)


def figures(
    results: Results,
    runs: Sequence[RunResult],
    slo_ttft_ms: float | None,
    tables: Sequence[RequestTable] | None = None,
) -> list[Figure]:
    """Every figure of the report, in reading order (pairs sit side by side); ``tables``:
    the arms' :class:`RequestTable`, when built already."""
    tables = _tables(runs, tables)
    out = [ttft_ccdf(runs, slo_ttft_ms, tables), ttft_vs_prompt(runs, tables)]
    out += [f for f in (group_ttft(results, "tenants", "tenant"),) if f]
    out += [f for f in (group_ttft(results, "priorities", "priority"),) if f]
    time = "time (s)"
    out += [
        Figure(
            "waiting",
            line_chart(_timeline(runs, _waiting), title="Queue length", x_label=time,
                       y_label="waiting requests"),
            "Requests waiting to be scheduled, sampled after every engine step.",
        ),
        Figure(
            "running",
            line_chart(_timeline(runs, _running), title="Batch size", x_label=time,
                       y_label="running requests"),
            "Requests in the running batch, sampled after every engine step.",
        ),
        throughput(runs, tables),
        preemptions(runs, tables),
        Figure(
            "kv-usage",
            line_chart(_timeline(runs, _kv_pct), title="KV cache usage", x_label=time,
                       y_label="KV blocks in use (%)", y_max=100.0),
            "Share of KV-cache blocks referenced by requests, sampled after every engine step.",
        ),
        tpot_ccdf(runs, tables),
    ]  # fmt: skip
    return out


def tpot_ccdf(runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None) -> Figure:
    samples = [
        (r.policy, ccdf_points(_ascending(t.tpot_ms)))
        for r, t in zip(runs, _tables(runs, tables), strict=True)
    ]
    svg = line_chart(
        samples,
        title="TPOT tail (CCDF)",
        x_label="TPOT (ms)",
        y_label="fraction with TPOT ≥ x",
        log_x=True,
        log_y=True,
    )
    caption = (
        "Fraction of completed requests (two or more output tokens) whose mean gap between "
        "output tokens was at least x; the x axis is logarithmic when TPOT spans a decade."
    )
    return Figure("tpot-ccdf", svg, caption)


def _waiting(point: TimelinePoint) -> float:
    return float(point.waiting)


def _running(point: TimelinePoint) -> float:
    return float(point.running)


def _kv_pct(point: TimelinePoint) -> float:
    return point.kv_usage * 100.0
