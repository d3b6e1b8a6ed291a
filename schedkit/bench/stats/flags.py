"""Flags: what no interval can say about a comparison or an arm.

Per comparison (:func:`comparison_flags`): requests starved past the baseline's longest
wait by more than the minimum effect, a higher rejection share. Per arm (:func:`run_flags`): policy faults, hook calls
over the hook budget, an engine that never caught up with its arrivals. Each flag is a
dict with ``kind``, a ``message`` for people, and data (``docs/results.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedkit.bench.spec import DEFAULT_MIN_EFFECT
from schedkit.bench.stats.estimators import FloatArray
from schedkit.bench.stats.request_table import RequestTable
from schedkit.records import RunResult

__all__ = [
    "comparison_flags",
    "overload",
    "policy_faults",
    "run_flags",
    "slow_hooks",
    "starvation",
]


def _flag(kind: str, message: str, **data: Any) -> dict[str, Any]:
    return {"kind": kind, "message": message, **data}


def comparison_flags(
    base: RunResult,
    other: RunResult,
    sa: Mapping[str, FloatArray],
    sb: Mapping[str, FloatArray],
    *,
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> list[dict[str, Any]]:
    """Starvation past the baseline's longest wait, and a higher rejection share."""
    flags = []
    starved = starvation(base, other, sa["wait_s"], sb["wait_s"], min_effect)
    if starved is not None:
        flags.append(starved)
    ra, rb = float(sa["rejected"].sum()), float(sb["rejected"].sum())
    n = max(1, sb["rejected"].size)
    if rb > ra:
        flags.append(
            _flag(
                "rejections",
                f"{other.policy} rejected {rb / n:.1%} of requests ({int(rb)}) against"
                f" {ra / n:.1%} ({int(ra)}) under {base.policy}; its latencies cover only"
                " the requests it served",
                rejected=int(rb),
                baseline_rejected=int(ra),
            )
        )
    return flags


def starvation(
    base: RunResult, other: RunResult, wait_a: FloatArray, wait_b: FloatArray, min_effect: float
) -> dict[str, Any] | None:
    """A flag when requests under ``other`` waited longer than the baseline's longest wait
    by more than the minimum effect (relative to that wait): a wait within it is the same
    wait, told apart only by the engine's step times. It says by how much, in seconds and
    relative to the baseline's longest."""
    longest = float(wait_a.max()) if wait_a.size else 0.0
    threshold = longest * (1.0 + min_effect)
    starved = wait_b > threshold
    count = int(starved.sum())
    if not count:
        return None
    worst = float(wait_b[starved].max())
    excess = worst - longest
    rel = excess / longest if longest > 0 else None
    by = f"{excess:,.1f} s" + (f" ({rel:+.1%})" if rel is not None else "")
    more = f"more than {min_effect * 100:g}% longer" if min_effect > 0 else "longer"
    return _flag(
        "starvation",
        f"{count} requests under {other.policy} waited {more} than the longest wait under"
        f" {base.policy} ({longest:,.1f} s); the worst waited {worst:,.1f} s, {by} longer",
        count=count,
        baseline_max_wait_s=longest,
        worst_wait_s=worst,
        excess_s=excess,
        excess_rel=rel,
    )


def _backlog(table: RequestTable, t: float) -> int:
    """Requests that had arrived by ``t`` and not yet left (finished or rejected)."""
    arrival, finish = table.arrival_s, table.finish_s
    left = np.where(np.isnan(finish), np.where(table.rejected, arrival, np.inf), finish)
    return int(np.count_nonzero((arrival <= t) & (left > t)))


OVERLOAD_MIN_BACKLOG = 0.05  # of the requests, and at least 10


def overload(run: RunResult, table: RequestTable | None = None) -> dict[str, Any] | None:
    """A flag when the engine never caught up with its arrivals: the requests in the
    system at the last arrival are many (5% of all, at least 10) and kept growing
    (mid-trace < three quarters in < last arrival). ``table``: ``run``'s, when built."""
    if not run.records:
        return None
    table = table if table is not None else RequestTable.of(run)
    first = float(table.arrival_s.min())
    last = float(table.arrival_s.max())
    if last <= first:
        return None
    points = [first + (last - first) * f for f in (0.5, 0.75, 1.0)]
    mid, late, end = (_backlog(table, t) for t in points)
    if end < max(10, OVERLOAD_MIN_BACKLOG * len(table)) or not mid < late < end:
        return None
    ttft = table.ttft_ms[~np.isnan(table.ttft_ms)]
    p50 = f"; p50 TTFT {np.median(ttft) / 1000:,.1f} s" if ttft.size else ""
    return _flag(
        "overload",
        f"{run.policy}: arrivals outpace completions: {end} requests in the system at the"
        f" last arrival, up from {mid} mid-trace{p50}. Every latency here measures the"
        " backlog; lower --rate-scale or add capacity to compare policies at a load the"
        " engine can serve",
        policy=run.policy,
        backlog=[mid, late, end],
    )


def policy_faults(run: RunResult) -> dict[str, Any] | None:
    if not run.policy_errors:
        return None
    hooks = ", ".join(f"{hook} {n}" for hook, n in sorted(run.policy_errors_by_hook.items()))
    return _flag(
        "policy_errors",
        f"{run.policy}: the policy faulted {run.policy_errors} times ({hooks or 'hooks'});"
        " each fault fell back to the default decision, so this arm is partly the default",
        policy=run.policy,
        errors=run.policy_errors,
        by_hook=dict(run.policy_errors_by_hook),
    )


def slow_hooks(run: RunResult) -> dict[str, Any] | None:
    if not run.slow_hook_calls:
        return None
    total = sum(run.slow_hook_calls.values())
    hooks = ", ".join(f"{hook} {n}" for hook, n in sorted(run.slow_hook_calls.items()))
    return _flag(
        "slow_hooks",
        f"{run.policy}: {total} hook calls took longer than the hook budget ({hooks}); their"
        " answers were used, but on an engine each one holds up a scheduling step",
        policy=run.policy,
        calls=total,
        by_hook=dict(run.slow_hook_calls),
    )


def run_flags(
    runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None
) -> list[dict[str, Any]]:
    """Per-arm flags: policy faults, slow hooks and overload. ``tables``: the arms'
    :class:`RequestTable`, when built already."""
    found = [policy_faults(r) for r in runs] + [slow_hooks(r) for r in runs]
    if tables is None:
        found += [overload(r) for r in runs]
    else:
        found += [overload(r, t) for r, t in zip(runs, tables, strict=True)]
    return [f for f in found if f is not None]
