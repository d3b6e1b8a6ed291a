"""Per-request samples of an arm, and the pairing of two arms' requests: what a comparison
(:mod:`schedkit.bench.stats.compare`) computes its statistics and intervals on."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from schedkit.bench.stats.estimators import FloatArray
from schedkit.bench.stats.metrics import LATENCIES
from schedkit.bench.stats.request_table import RequestTable
from schedkit.errors import SchedkitError
from schedkit.records import RequestRecord, RunResult

__all__ = ["Index", "paired", "samples", "wait_s", "waits_s"]

Index = npt.NDArray[np.intp]


def wait_s(record: RequestRecord, end_s: float) -> float:
    """How long the request waited before it was first scheduled: until it was
    scheduled, else until it left (rejected or aborted while waiting), else until
    ``end_s`` (still waiting when the run ended)."""
    if record.scheduled_s is not None:
        left = record.scheduled_s
    elif record.finish_s is not None:
        left = record.finish_s
    else:
        left = record.arrival_s if record.rejected else max(end_s, record.arrival_s)
    return max(0.0, left - record.arrival_s)


def samples(
    run: RunResult,
    *,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    table: RequestTable | None = None,
) -> dict[str, FloatArray]:
    """Per-request samples of one arm, aligned with ``run.records`` (NaN: none).

    Latencies in ms (completed requests only), ``met_slo`` (1/0, NaN when no target
    applies), ``rejected`` (1/0), ``throughput`` (a completed request's output tokens
    over the run's duration: they sum to the throughput), ``preemptions``,
    ``recomputed`` (NaN when the engine counts recomputed tokens only per run),
    ``prefix`` (cached and prompt tokens of requests that were scheduled; for a live
    server, which says when it served a request but not when it scheduled it, of those
    it finished), and
    ``wait_s`` (:func:`wait_s`, every request). ``table``: ``run``'s, when built already.
    """
    t = table if table is not None else RequestTable.of(run)
    n = len(t)
    if t.slo_applies(slo_ttft_ms, slo_tpot_ms):
        met = t.met_slo(slo_ttft_ms, slo_tpot_ms).astype(np.float64)
    else:
        met = np.full(n, np.nan)
    duration = run.duration_s
    tokens = np.where(t.completed, t.output_tokens.astype(np.float64), 0.0)
    recomputed = t.recomputed_tokens.astype(np.float64)
    if recomputed.sum() != run.recomputed_tokens:  # counted per run only: no interval
        recomputed = np.full(n, np.nan)
    scheduled = ~np.isnan(t.scheduled_s)
    if not scheduled.any() and run.prefix_query_tokens:  # a live server's: the requests
        scheduled = t.completed.astype(bool)  # it finished said what its cache served
    prefix = np.zeros((n, 2))
    prefix[scheduled, 0] = t.cached_tokens[scheduled]
    prefix[scheduled, 1] = t.prompt_tokens[scheduled]
    return {
        **{key: t.latency(key).copy() for key in LATENCIES},
        "met_slo": met,
        "rejected": t.rejected.astype(np.float64),
        "throughput": tokens / duration if duration > 0 else np.zeros(n),
        "preemptions": t.preemptions.astype(np.float64),
        "recomputed": recomputed,
        "prefix": prefix,
        "wait_s": waits_s(t, duration),
    }


def waits_s(table: RequestTable, end_s: float) -> FloatArray:
    """:func:`wait_s` of every request of ``table``."""
    arrival = table.arrival_s
    left = np.where(table.rejected, arrival, np.maximum(end_s, arrival))
    left = np.where(np.isnan(table.finish_s), left, table.finish_s)
    left = np.where(np.isnan(table.scheduled_s), left, table.scheduled_s)
    waits: FloatArray = np.maximum(0.0, left - arrival)
    return waits


def paired(base: RunResult, other: RunResult) -> tuple[Index, Index]:
    """Positions of each request in both arms, in the baseline's arrival order (the order
    the sections follow). Requests pair by id, or by position when ids
    repeat."""
    n = len(base.records)
    if len(other.records) != n:
        raise SchedkitError(
            f"arms {base.policy!r} and {other.policy!r} replayed different requests"
            f" ({n} vs {len(other.records)}); compare arms of one bench run"
        )
    ids = {r.request_id: i for i, r in enumerate(other.records)}
    positions = np.arange(n, dtype=np.intp)
    if len(ids) == n and all(r.request_id in ids for r in base.records):
        positions = np.array([ids[r.request_id] for r in base.records], dtype=np.intp)
    order = np.argsort([r.arrival_s for r in base.records], kind="stable").astype(np.intp)
    return order, positions[order]
