"""Per-request samples of an arm, and the pairing of two arms' requests: what a comparison
(:mod:`schedkit.bench.stats.compare`) computes its statistics and intervals on."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from schedkit.bench.stats.estimators import FloatArray
from schedkit.bench.stats.metrics import is_completed, latencies_ms, meets_slo, slo_applies
from schedkit.errors import SchedkitError
from schedkit.records import RequestRecord, RunResult

__all__ = ["Index", "paired", "samples", "wait_s"]

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
    run: RunResult, *, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None
) -> dict[str, FloatArray]:
    """Per-request samples of one arm, aligned with ``run.records`` (NaN: none).

    Latencies in ms (completed requests only), ``met_slo`` (1/0, NaN when no target
    applies), ``rejected`` (1/0), ``throughput`` (a completed request's output tokens
    over the run's duration: they sum to the throughput), ``preemptions``,
    ``recomputed`` (NaN when the engine counts recomputed tokens only per run),
    ``prefix`` (cached and prompt tokens of requests that were scheduled), and
    ``wait_s`` (:func:`wait_s`, every request).
    """
    records = run.records
    n = len(records)
    lat = {key: np.full(n, np.nan) for key in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")}
    for i, r in enumerate(records):
        for key, value in latencies_ms(r).items():
            if value is not None:
                lat[key][i] = value
    applies = slo_applies(records, slo_ttft_ms, slo_tpot_ms)
    met = np.array(
        [float(meets_slo(r, slo_ttft_ms, slo_tpot_ms)) if applies else np.nan for r in records]
    )
    duration = run.duration_s
    tokens = np.array([float(r.output_tokens) if is_completed(r) else 0.0 for r in records])
    recomputed = np.array([float(r.recomputed_tokens) for r in records])
    if recomputed.sum() != run.recomputed_tokens:  # counted per run only: no interval
        recomputed = np.full(n, np.nan)
    prefix = np.array(
        [
            (float(r.cached_tokens), float(r.prompt_tokens))
            if r.scheduled_s is not None
            else (0.0, 0.0)
            for r in records
        ]
    ).reshape(n, 2)
    return {
        **lat,
        "met_slo": met,
        "rejected": np.array([float(r.rejected) for r in records]),
        "throughput": tokens / duration if duration > 0 else np.zeros(n),
        "preemptions": np.array([float(r.preemptions) for r in records]),
        "recomputed": recomputed,
        "prefix": prefix,
        "wait_s": np.array([wait_s(r, duration) for r in records]),
    }


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
