"""One arm's requests as columns: each request's latencies computed once, for every output.

The summary, the comparison's samples, the flags, the per-request file, vLLM's format and
the report's figures all read the same per-request numbers. :class:`RequestTable` holds
them as numpy arrays aligned with ``run.records`` (NaN where a request has none), built in
one pass over the records, so a bench of tens of thousands of requests computes each
request's TTFT once rather than once per output. Every value equals what the per-record
definitions give (:func:`schedkit.bench.stats.metrics.latencies_ms`, ``meets_slo``): the
same operations on the same floats, in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from schedkit.records import RequestRecord, RunResult

__all__ = ["COMPLETED_REASONS", "BoolArray", "IntArray", "RequestTable", "nullable"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

COMPLETED_REASONS = frozenset({"length", "stop"})
_NAN = math.nan


def _optional(values: Sequence[float | None]) -> FloatArray:
    """Floats with None as NaN (numpy's conversion to a float array makes None NaN)."""
    return np.array(values, dtype=np.float64)


def _counts(values: Sequence[int]) -> IntArray:
    return np.array(values, dtype=np.int64)


def nullable(values: FloatArray) -> list[float | None]:
    """``values`` as Python floats, NaN as None (what the outputs write for "none")."""
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        out[i] = None
    return out


def _target(
    own: FloatArray, has_own: BoolArray, run_wide: float | None
) -> tuple[FloatArray, BoolArray]:
    """Each request's target and whether it has one: its own, else the run-wide one."""
    if run_wide is None:
        return own, has_own
    return np.where(has_own, own, run_wide), np.ones_like(has_own)


@dataclass(frozen=True, eq=False, slots=True)
class RequestTable:
    """The requests of one arm as columns aligned with ``records``; times in seconds (NaN:
    not reached), latencies in ms (NaN: undefined, or the request did not complete)."""

    records: Sequence[RequestRecord]
    arrival_s: FloatArray
    scheduled_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    cached_tokens: IntArray
    preemptions: IntArray
    recomputed_tokens: IntArray
    finish_reasons: list[str]
    completed: BoolArray  # finish reason "length" or "stop"
    rejected: BoolArray
    own_ttft_ms: FloatArray  # the request's own SLO targets (NaN: none) ...
    own_tpot_ms: FloatArray
    has_own_ttft: BoolArray  # ... and whether it has one (a NaN target is one)
    has_own_tpot: BoolArray
    ttft_ms: FloatArray
    tpot_ms: FloatArray
    e2e_ms: FloatArray
    queue_ms: FloatArray
    deadline_s: FloatArray  # the request's deadline after arrival (NaN: none)

    @classmethod
    def of(cls, run: RunResult | Sequence[RequestRecord]) -> RequestTable:
        """The table of ``run``'s records (or of ``records``), one column at a time."""
        records = run.records if isinstance(run, RunResult) else run
        arrival = np.array([r.arrival_s for r in records], dtype=np.float64)
        scheduled = _optional([r.scheduled_s for r in records])
        first = _optional([r.first_token_s for r in records])
        finish = _optional([r.finish_s for r in records])
        output = _counts([r.output_tokens for r in records])
        reasons = [r.finish_reason for r in records]
        completed = np.array([f in COMPLETED_REASONS for f in reasons], dtype=np.bool_)
        own_ttft, own_tpot = [r.slo_ttft_ms for r in records], [r.slo_tpot_ms for r in records]
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = (finish - first) * 1000.0 / (output - 1)
        return cls(
            records=records,
            arrival_s=arrival,
            scheduled_s=scheduled,
            first_token_s=first,
            finish_s=finish,
            prompt_tokens=_counts([r.prompt_tokens for r in records]),
            output_tokens=output,
            cached_tokens=_counts([r.cached_tokens for r in records]),
            preemptions=_counts([r.preemptions for r in records]),
            recomputed_tokens=_counts([r.recomputed_tokens for r in records]),
            finish_reasons=reasons,
            completed=completed,
            rejected=np.array([f == "rejected" for f in reasons], dtype=np.bool_),
            own_ttft_ms=_optional(own_ttft),
            own_tpot_ms=_optional(own_tpot),
            has_own_ttft=np.array([v is not None for v in own_ttft], dtype=np.bool_),
            has_own_tpot=np.array([v is not None for v in own_tpot], dtype=np.bool_),
            ttft_ms=np.where(completed, (first - arrival) * 1000.0, _NAN),
            tpot_ms=np.where(completed & (output >= 2), tpot, _NAN),
            e2e_ms=np.where(completed, (finish - arrival) * 1000.0, _NAN),
            queue_ms=np.where(completed, (scheduled - arrival) * 1000.0, _NAN),
            deadline_s=_optional([r.deadline_s for r in records]),
        )

    def met_deadline(self) -> BoolArray:
        """Which requests completed within their deadline (False without one)."""
        with np.errstate(invalid="ignore"):
            met: BoolArray = self.completed & (self.finish_s - self.arrival_s <= self.deadline_s)
        return met

    def take(self, rows: IntArray) -> RequestTable:
        """The table of the requests at positions ``rows``, in that order."""
        values = {
            f.name: getattr(self, f.name)[rows]
            for f in fields(self)
            if f.name not in ("records", "finish_reasons")
        }
        records, reasons = self.records, self.finish_reasons
        return RequestTable(
            records=[records[i] for i in rows.tolist()],
            finish_reasons=[reasons[i] for i in rows.tolist()],
            **values,
        )

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def latency(self, key: str) -> FloatArray:
        """The latency ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` or ``queue_ms``."""
        values: FloatArray = getattr(self, key)
        return values

    def slo_applies(self, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
        """Whether any request has a TTFT or TPOT target, its own or the run-wide one."""
        if slo_ttft_ms is not None or slo_tpot_ms is not None:
            return len(self) > 0
        return bool((self.has_own_ttft | self.has_own_tpot).any())

    def met_slo(self, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> BoolArray:
        """Per request, whether it completed within its (possibly overridden) targets: a
        missing target is not checked, a request without a TPOT passes the TPOT check."""
        ttft_target, has_ttft = _target(self.own_ttft_ms, self.has_own_ttft, slo_ttft_ms)
        tpot_target, has_tpot = _target(self.own_tpot_ms, self.has_own_tpot, slo_tpot_ms)
        ttft, tpot = self.ttft_ms, self.tpot_ms
        # ``meets_slo``'s comparisons exactly, also for a NaN target: ttft > target fails,
        # tpot <= target passes
        ttft_ok = ~has_ttft | (~np.isnan(ttft) & ~(ttft > ttft_target))
        tpot_ok = ~has_tpot | np.isnan(tpot) | (tpot <= tpot_target)
        met: BoolArray = self.completed & ttft_ok & tpot_ok
        return met
