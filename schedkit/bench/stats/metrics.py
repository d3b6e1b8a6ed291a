"""Serving metrics of one arm (comparisons between arms: :mod:`schedkit.bench.stats.compare`).

Definitions, in milliseconds, as ``vllm bench serve`` computes them:

- TTFT (time to first token) = first_token_s - arrival_s;
- TPOT (time per output token) = (finish_s - first_token_s) / (output_tokens - 1), for
  requests with >= 2 output tokens: one request's mean gap between output tokens after
  the first; percentiles are over requests;
- ITL (inter-token latency): every gap between two consecutive output tokens of a
  request, pooled over requests (the run's weighted ``(gap, tokens)`` pairs), so long
  outputs weigh more than in TPOT;
- E2E (end-to-end latency) = finish_s - arrival_s; queue = scheduled_s - arrival_s;
- throughputs over the run's duration (its first arrival, 0 s, to its last step's end):
  output tokens/s, completed requests/s, and prompt plus output tokens/s of completed
  requests (vLLM's ``output_throughput``, ``request_throughput``,
  ``total_token_throughput``); request goodput is the requests meeting their SLOs per
  second of it (vLLM's ``request_goodput``, ``--goodput ttft:MS tpot:MS``);
- goodput (DistServe, Zhong et al., OSDI'24): the highest request rate at which at least
  90% of requests meet their SLOs (``--goodput`` searches it); SLO attainment is the
  share that meets them at the replayed rate. Rejected and unfinished requests miss, as
  guidellm counts errored requests against its SLO share.

Only completed requests (finish reason ``length`` or ``stop``) give latency samples.
A request meets its SLO when it completed, its TTFT is within its TTFT target and its
TPOT within its TPOT target. A request's own ``slo_ttft_ms``/``slo_tpot_ms`` override the
run-wide targets; a missing target is not checked, and a request with fewer than two
output tokens has no TPOT, so it passes the TPOT check. Rejected and unfinished requests
miss. Attainment is met / requests, and null when no target applies to any request.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from schedkit.bench.results import percentile_key
from schedkit.bench.stats.estimators import (
    FloatArray,
    jain,
    percentile,
    summary,
    weighted_percentile,
    weighted_summary,
)
from schedkit.bench.stats.request_table import COMPLETED_REASONS, RequestTable, nullable
from schedkit.records import RequestRecord, RunResult

#: Service weights of one prompt token and one output token, VTC's defaults
#: (``plugins/vtc``: ``input_weight`` 1, ``output_weight`` 2).
SERVICE_INPUT_WEIGHT = 1.0
SERVICE_OUTPUT_WEIGHT = 2.0
LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")


_Key = TypeVar("_Key", str, int)

_NUMBER = re.compile(r"\d+(?:\.\d+)?")  # numbers in rejection reasons, grouped as N


def is_completed(record: RequestRecord) -> bool:
    """Whether the request ran to a normal end (``length`` or ``stop``)."""
    return record.finish_reason in COMPLETED_REASONS


def latencies_ms(record: RequestRecord) -> dict[str, float | None]:
    """TTFT, TPOT, E2E and queue time of one request in ms; None where undefined."""
    out: dict[str, float | None] = dict.fromkeys(LATENCIES)
    if not is_completed(record):
        return out
    arrival, first, finish = record.arrival_s, record.first_token_s, record.finish_s
    if first is not None:
        out["ttft_ms"] = (first - arrival) * 1000.0
        if finish is not None and record.output_tokens >= 2:
            out["tpot_ms"] = (finish - first) * 1000.0 / (record.output_tokens - 1)
    if finish is not None:
        out["e2e_ms"] = (finish - arrival) * 1000.0
    if record.scheduled_s is not None:
        out["queue_ms"] = (record.scheduled_s - arrival) * 1000.0
    return out


def _targets(
    record: RequestRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> tuple[float | None, float | None]:
    ttft = record.slo_ttft_ms if record.slo_ttft_ms is not None else slo_ttft_ms
    tpot = record.slo_tpot_ms if record.slo_tpot_ms is not None else slo_tpot_ms
    return ttft, tpot


def slo_applies(
    records: Iterable[RequestRecord], slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> bool:
    """Whether any request has a TTFT or TPOT target, its own or the run-wide one."""
    return any(_targets(r, slo_ttft_ms, slo_tpot_ms) != (None, None) for r in records)


def meets_slo(record: RequestRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    """Whether the request completed within its (possibly overridden) targets."""
    if not is_completed(record):
        return False
    ttft_target, tpot_target = _targets(record, slo_ttft_ms, slo_tpot_ms)
    lat = latencies_ms(record)
    if ttft_target is not None and (lat["ttft_ms"] is None or lat["ttft_ms"] > ttft_target):
        return False
    return tpot_target is None or lat["tpot_ms"] is None or lat["tpot_ms"] <= tpot_target


def per_request_samples(
    run: RunResult, *, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None
) -> dict[str, list[float | None]]:
    """Per-request samples aligned with ``run.records``, for paired bootstraps.

    Keys: ``ttft_ms``, ``tpot_ms``, ``e2e_ms``, ``queue_ms`` (None where undefined or the
    request did not complete) and ``met_slo`` (1.0/0.0; all None when no target applies).
    """
    table = RequestTable.of(run)
    out: dict[str, list[float | None]] = {key: nullable(table.latency(key)) for key in LATENCIES}
    if table.slo_applies(slo_ttft_ms, slo_tpot_ms):
        out["met_slo"] = table.met_slo(slo_ttft_ms, slo_tpot_ms).astype(np.float64).tolist()
    else:
        out["met_slo"] = [None] * len(table)
    return out


def _queue_end(record: RequestRecord, duration_s: float) -> float:
    """When the request leaves the waiting queue: first scheduled, else its finish (say,
    rejected or aborted while waiting), else its arrival (rejected on arrival), else the
    end of the run (still waiting)."""
    if record.scheduled_s is not None:
        return record.scheduled_s
    if record.finish_s is not None:
        return record.finish_s
    return record.arrival_s if record.rejected else max(duration_s, record.arrival_s)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint, sorted union of half-open intervals (empty ones dropped)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _intersect(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Intersection of two disjoint, sorted interval lists, in one merge pass."""
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


class _Cover:
    """Disjoint, sorted intervals, queried in O(log n)."""

    __slots__ = ("cum", "ends", "starts")

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        self.starts = [s for s, _ in intervals]
        self.ends = [e for _, e in intervals]
        self.cum = [0.0]  # cum[i]: measure of the intervals before intervals[i]
        for s, e in intervals:
            self.cum.append(self.cum[-1] + (e - s))

    @property
    def total(self) -> float:
        return self.cum[-1]

    def measure(self, lo: float, hi: float) -> float:
        """Measure of the cover inside ``[lo, hi]``."""
        return self._to(hi) - self._to(lo)

    def _to(self, t: float) -> float:
        i = bisect_right(self.starts, t) - 1
        return 0.0 if i < 0 else self.cum[i] + min(t, self.ends[i]) - self.starts[i]

    def holds_before(self, t: float) -> bool:
        """Whether the cover holds the instant just before ``t``."""
        i = bisect_left(self.starts, t) - 1
        return i >= 0 and t <= self.ends[i]


def service_jain(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    input_weight: float = SERVICE_INPUT_WEIGHT,
    output_weight: float = SERVICE_OUTPUT_WEIGHT,
) -> float | None:
    """Jain's index over the tenants' service rates while backlogged together (VTC's notion).

    Service (Sheng et al., OSDI'24) is weighted tokens: a request's prompt tokens x
    ``input_weight`` and its first output token x ``output_weight`` are served at its
    ``first_token_s`` (prefill completes); its other output tokens x ``output_weight`` are
    spread uniformly over ``first_token_s .. finish_s`` (records keep no per-token times;
    an unfinished request's over ``first_token_s .. duration_s``).

    As in the paper, a tenant is *backlogged* while it has a request in the waiting queue:
    ``[arrival_s, scheduled_s)`` of each request (never scheduled: until ``finish_s``, or
    never if rejected on arrival without one, or until ``duration_s`` if still waiting;
    records do not show re-queueing after preemption). ``B`` is the time when at least
    two tenants are backlogged. A tenant's rate is its service while it is backlogged
    inside ``B``, over the time it is backlogged inside ``B``; a token served at ``t``
    counts when that holds just before ``t`` (the step that computed it). Tenants never
    backlogged inside ``B`` are left out. The index is 1.0 when backlogged tenants were
    served at equal rates (VTC's goal) and 1/n when one took all; None when no two tenants
    are ever backlogged at once. Tenants weigh equally. O(n log n) in the records.

    A tenant that asks for less than its share is rarely backlogged, so it seldom counts;
    a running request's decode is not backlog, because the scheduler cannot speed it up.
    """
    by_tenant: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        by_tenant.setdefault(r.tenant, []).append((r.arrival_s, _queue_end(r, duration_s)))
    backlog = {t: _union(iv) for t, iv in by_tenant.items()}
    shared = _backlogged_together(backlog)
    if not shared:
        return None
    covers = {t: _Cover(_intersect(iv, shared)) for t, iv in backlog.items()}
    served = _served_while_backlogged(records, covers, duration_s, input_weight, output_weight)
    rates = [served[t] / c.total for t, c in covers.items() if c.total > 0]
    return jain(rates) if len(rates) > 1 else None


def _backlogged_together(
    backlog: Mapping[str, list[tuple[float, float]]],
) -> list[tuple[float, float]]:
    """``B``: the disjoint, sorted intervals when at least two tenants are backlogged, from
    a sweep over the edges of every tenant's backlog intervals."""
    edges = sorted(
        (t, step) for iv in backlog.values() for s, e in iv for t, step in ((s, 1), (e, -1))
    )
    shared: list[tuple[float, float]] = []
    count, opened = 0, 0.0
    for t, step in edges:  # ends sort before starts at the same time
        before = count
        count += step
        if before < 2 <= count:
            opened = t
        elif count < 2 <= before and t > opened:
            if shared and shared[-1][1] == opened:
                shared[-1] = (shared[-1][0], t)
            else:
                shared.append((opened, t))
    return shared


def _served_while_backlogged(
    records: Sequence[RequestRecord],
    covers: Mapping[str, _Cover],
    duration_s: float,
    input_weight: float,
    output_weight: float,
) -> dict[str, float]:
    """Each tenant's weighted tokens served while it was backlogged inside ``B`` (its
    cover): prefill at ``first_token_s``, the other output tokens spread evenly up to
    ``finish_s`` (:func:`service_jain`)."""
    served: dict[str, float] = dict.fromkeys(covers, 0.0)
    for r in records:
        first = r.first_token_s
        cover = covers[r.tenant]
        if first is None or not cover.total:
            continue
        tokens = r.output_tokens
        if cover.holds_before(first):
            served[r.tenant] += input_weight * r.prompt_tokens + output_weight * min(tokens, 1)
        if tokens > 1:
            end = r.finish_s if r.finish_s is not None else max(duration_s, first)
            spread = output_weight * (tokens - 1)
            if end > first:
                served[r.tenant] += spread * cover.measure(first, end) / (end - first)
            elif cover.holds_before(first):
                served[r.tenant] += spread
    return served


def _group(
    table: RequestTable, slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> dict[str, Any]:
    """Counts, latency summaries and attainment of a subset of requests."""
    done = table.completed
    queue = _present(table.queue_ms)
    applies = table.slo_applies(slo_ttft_ms, slo_tpot_ms)
    met = int(np.count_nonzero(table.met_slo(slo_ttft_ms, slo_tpot_ms))) if applies else 0
    n = len(table)
    deadlines = int(np.count_nonzero(~np.isnan(table.deadline_s)))
    by_deadline = int(np.count_nonzero(table.met_deadline())) if deadlines else None
    return {
        "requests": n,
        "completed": int(np.count_nonzero(done)),
        "rejected": int(np.count_nonzero(table.rejected)),
        "output_tokens": int(table.output_tokens[done].sum()),
        "ttft_ms": summary(_present(table.ttft_ms)),
        "tpot_ms": summary(_present(table.tpot_ms)),
        "queue_ms": summary(queue),
        "queue_ms_max": float(queue.max()) if queue.size else None,
        "slo_attainment": met / n if applies and n else None,
        "slo_met": met if applies else None,
        "deadline_met": by_deadline,
        "deadline_attainment": None if by_deadline is None else by_deadline / deadlines,
    }


def _present(values: FloatArray) -> FloatArray:
    """The samples of ``values`` (NaN: none), in request order."""
    present: FloatArray = values[~np.isnan(values)]
    return present


def _breakdown(
    table: RequestTable,
    groups: Mapping[str, list[int]],
    duration_s: float,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> dict[str, dict[str, Any]]:
    """:func:`_group` of each group of requests (positions in ``table``), with its output
    throughput over the run's ``duration_s``."""
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    out = {}
    for key, rows in groups.items():
        group = _group(table.take(np.array(rows, dtype=np.intp)), slo_ttft_ms, slo_tpot_ms)
        out[key] = {**group, "throughput_tok_s": group["output_tokens"] * per_s}
    return out


def itl_ms(run: RunResult) -> FloatArray:
    """The run's inter-token gaps in ms and their weights (tokens), as rows of two."""
    pairs = np.array(run.itl, dtype=np.float64).reshape(-1, 2)
    pairs[:, 0] *= 1000.0
    return pairs


#: vllm bench serve's names of the latencies (``--percentile-metrics``) -> schedkit's keys
VLLM_LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0)  # every latency summary has these


def more_percentiles(
    run: RunResult,
    metrics: Sequence[str],
    percentiles: Sequence[float],
    table: RequestTable | None = None,
) -> dict[str, dict[str, float | None]]:
    """The ``percentiles`` a summary does not have already, of the latencies ``metrics``
    (vLLM's names), keyed by schedkit's latency key and :func:`percentile_key`; empty when
    every one asked for is in every summary. ``table``: ``run``'s, when built already."""
    extra = [q for q in dict.fromkeys(percentiles) if q not in SUMMARY_PERCENTILES]
    if not extra:
        return {}
    table = table if table is not None else RequestTable.of(run)
    out: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(metrics):
        key = VLLM_LATENCIES[name]
        if key == "itl_ms":
            pairs = [(gap * 1000.0, float(w)) for gap, w in run.itl if w > 0]
            values = [weighted_percentile(pairs, q) if pairs else None for q in extra]
        else:
            samples = np.sort(_present(table.latency(key)))
            values = [percentile(samples, q) if samples.size else None for q in extra]
        out[key] = {percentile_key(q): v for q, v in zip(extra, values, strict=True)}
    return out


def compute_metrics(
    run: RunResult,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    percentile_metrics: Sequence[str] = (),
    metric_percentiles: Sequence[float] = (),
) -> dict[str, Any]:
    """Every metric of one arm as a JSON-serialisable dict (see the module docstring).

    Latency entries are ``{"mean", "p50", "p90", "p99"}`` in ms, null without samples;
    those named in ``percentile_metrics`` (vLLM's names) also have ``percentiles``, the
    ``metric_percentiles`` not among those (``{"p99.9": ...}``).
    With more than one tenant, adds ``tenants``, ``jain_fairness`` and ``jain_ttft``.
    ``jain_fairness`` is :func:`service_jain`: Jain's index over the tenants' service
    rates (VTC-weighted tokens) while at least two have requests waiting, None when no
    two ever do. ``jain_ttft`` is Jain's index over the tenants' mean TTFT (tenants without a TTFT
    sample left out), 1.0 when every tenant waits the same on average, 1/n when one does
    all the waiting; it calls equal waiting fair even when one tenant caused it. With
    more than one priority value, adds ``priorities`` keyed by the value as a string.
    """
    table = RequestTable.of(run)
    metrics = _arm_metrics(run, table, slo_ttft_ms, slo_tpot_ms)
    more = more_percentiles(run, percentile_metrics, metric_percentiles, table)
    for key, values in more.items():
        metrics[key] = {**metrics[key], "percentiles": values}
    if run.routed:  # a cluster: requests per replica
        metrics["routed"] = list(run.routed)
    if run.decode_routed:  # disaggregated: routed is per prefill instance
        metrics["disaggregated"] = {
            "routed_decode": list(run.decode_routed),
            "phases_ms": handoff_phases(run.records),
        }
    metrics.update(_breakdowns(table, run.duration_s, slo_ttft_ms, slo_tpot_ms))
    return metrics


#: a disaggregated request's phases: name -> the times it runs between (``Handoff``'s, or
#: the record's ``arrival_s``, ``scheduled_s`` (its prefill's) and ``finish_s``)
PHASES = {
    "prefill_queue": ("arrival_s", "scheduled_s"),
    "prefill": ("scheduled_s", "prefill_end_s"),
    "decode_kv_wait": ("prefill_end_s", "kv_alloc_s"),
    "link_wait": ("kv_alloc_s", "transfer_start_s"),
    "transfer": ("transfer_start_s", "transfer_end_s"),
    "decode_queue": ("transfer_end_s", "decode_start_s"),
    "decode": ("decode_start_s", "finish_s"),
}


_RECORD_TIMES = ("arrival_s", "scheduled_s", "finish_s")


def handoff_phases(records: Sequence[RequestRecord]) -> dict[str, dict[str, float | None]]:
    """Where a disaggregated run's completed requests spent their time: each phase's
    summary in ms (prefill queue and prefill on the prefill instance, waiting for decode
    KV blocks, for the link, the transfer, the decode queue and decode). TTFT is the sum
    up to the decode queue, plus the decode instance's first step."""
    rows = []
    for r in records:
        h = r.handoff
        if h is None or not is_completed(r):
            continue
        times = {name: getattr(r, name) for name in _RECORD_TIMES}
        times.update((name, getattr(h, name)) for name in _HANDOFF_TIMES)
        rows.append([times[end] - times[start] for start, end in PHASES.values()])
    spans = np.array(rows, dtype=np.float64).reshape(-1, len(PHASES)) * 1000.0
    return {name: summary(spans[:, i]) for i, name in enumerate(PHASES)}


# the times a ``Handoff`` keeps (the others are the record's)
_HANDOFF_TIMES = tuple(
    dict.fromkeys(t for span in PHASES.values() for t in span if t not in _RECORD_TIMES)
)


def _rejections(run: RunResult, table: RequestTable) -> dict[str, int]:
    """Rejections per reason, reasons that differ only in their numbers counted as one."""
    rejected = np.flatnonzero(table.rejected).tolist()
    by_reason = dict(run.rejections) or dict(
        Counter(run.records[i].reject_reason or "unspecified" for i in rejected)
    )
    rejections: Counter[str] = Counter()
    for reason, count in by_reason.items():  # "needs 7 blocks" and "needs 9 blocks" are one
        rejections[_NUMBER.sub("N", reason)] += count
    return dict(rejections)


def _arm_metrics(
    run: RunResult, table: RequestTable, slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> dict[str, Any]:
    """The arm's counts, latencies, throughput, cache, SLO and policy health, over all
    its requests."""
    overall = _group(table, slo_ttft_ms, slo_tpot_ms)
    duration = run.duration_s
    per_s = 1.0 / duration if duration > 0 else 0.0
    prompt_tokens = int(table.prompt_tokens[table.completed].sum())
    met = overall["slo_met"]
    return {
        "policy": run.policy,
        "requests": overall["requests"],
        "completed": overall["completed"],
        "rejected": overall["rejected"],
        "unfinished": table.finish_reasons.count(""),
        "rejections": _rejections(run, table),
        "failed": table.finish_reasons.count("error"),
        "errors": dict(run.errors),
        "ttft_ms": overall["ttft_ms"],
        "tpot_ms": overall["tpot_ms"],
        "itl_ms": weighted_summary(itl_ms(run)),
        "e2e_ms": summary(_present(table.e2e_ms)),
        "queue_ms": overall["queue_ms"],
        "queue_ms_max": overall["queue_ms_max"],
        "output_tokens": overall["output_tokens"],
        "throughput_tok_s": overall["output_tokens"] * per_s,
        "request_throughput_rps": overall["completed"] * per_s,
        "total_token_throughput_tok_s": (prompt_tokens + overall["output_tokens"]) * per_s,
        "request_goodput_rps": None if met is None else met * per_s,
        "preemptions": run.preemptions,
        "recomputed_tokens": run.recomputed_tokens,
        "prefix_hit_rate": (
            run.prefix_hit_tokens / run.prefix_query_tokens if run.prefix_query_tokens else 0.0
        ),
        "kv_usage_mean": run.kv_usage_mean,
        "slo_attainment": overall["slo_attainment"],
        "slo_met": overall["slo_met"],
        "policy_errors": run.policy_errors,
        "policy_errors_by_hook": dict(run.policy_errors_by_hook),
        "slow_hook_calls": sum(run.slow_hook_calls.values()),
        "slow_hook_calls_by_hook": dict(run.slow_hook_calls),
        "duration_s": duration,
        "steps": run.steps,
        "wall_s": run.wall_s,
    }


def _breakdowns(
    table: RequestTable,
    duration_s: float,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> dict[str, Any]:
    """``tenants`` with the fairness indexes, and ``priorities``, each where the requests
    have more than one."""
    records = table.records
    out: dict[str, Any] = {}
    tenants = _positions([r.tenant for r in records])
    if len(tenants) > 1:
        by_tenant = dict(sorted(tenants.items()))
        out["tenants"] = _breakdown(table, by_tenant, duration_s, slo_ttft_ms, slo_tpot_ms)
        means = [m for t in out["tenants"].values() if (m := t["ttft_ms"]["mean"]) is not None]
        out["jain_fairness"] = service_jain(records, duration_s)
        out["jain_ttft"] = jain(means) if means else None
    priorities = _positions([r.priority for r in records])
    if len(priorities) > 1:
        by_priority = {str(p): rows for p, rows in sorted(priorities.items())}
        out["priorities"] = _breakdown(table, by_priority, duration_s, slo_ttft_ms, slo_tpot_ms)
    return out


def _positions(keys: list[_Key]) -> dict[_Key, list[int]]:
    """The positions of each distinct key, in order; one entry without looping when all
    are alike (the common case)."""
    if len(set(keys)) <= 1:
        return {keys[0]: list(range(len(keys)))} if keys else {}
    out: dict[_Key, list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return out
