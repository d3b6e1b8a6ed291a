"""The report's tables: metrics side by side, per tenant and priority, and the settings.

Cells are strings, formatted for people: latencies in ms with one decimal, rates as
percentages, settings rounded (``span_s`` 875.4) with nested ones as ``key=value`` lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from schedkit.bench.report.engines import arm_engines, differing, engine_context, engine_rows
from schedkit.bench.report.plots import GroupKey, group_order, groups_of
from schedkit.bench.results import ArmMetrics, GroupMetrics, Results, Summary

Rows = list[list[str]]
NA = "n/a"


def fmt(value: float | None, kind: str) -> str:
    if value is None:
        return NA
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "ms":
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{value:,.{int(kind[1:])}f}"  # "f<digits>"


def _round(value: float) -> str:
    """A setting's number as a person writes it: 875.4, 22.12, 0.0005, 2000."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"


Read = Callable[[ArmMetrics], float | None]  # one metric of an arm

_LATENCIES: list[tuple[str, Callable[[ArmMetrics], Summary]]] = [
    ("TTFT", lambda m: m.ttft_ms),
    ("TPOT", lambda m: m.tpot_ms),
    ("ITL", lambda m: m.itl_ms),
    ("E2E", lambda m: m.e2e_ms),
    ("Queue", lambda m: m.queue_ms),
]
_PERCENTILES: list[tuple[str, Callable[[Summary], float | None]]] = [
    ("mean", lambda s: s.mean),
    ("p50", lambda s: s.p50),
    ("p90", lambda s: s.p90),
    ("p99", lambda s: s.p99),
]


def _percentile(
    summary: Callable[[ArmMetrics], Summary], pick: Callable[[Summary], float | None]
) -> Read:
    return lambda m: pick(summary(m))


# (label, read, format, shown only when some arm has a value)
_SPECS: list[tuple[str, Read, str, bool]] = [
    ("Requests", lambda m: m.requests, "int", False),
    ("Completed", lambda m: m.completed, "int", False),
    ("Rejected", lambda m: m.rejected, "int", False),
    *[
        (f"{label} {p} (ms)", _percentile(summary, pick), "ms", False)
        for label, summary in _LATENCIES
        for p, pick in _PERCENTILES
    ],
    ("Output throughput (tok/s)", lambda m: m.throughput_tok_s, "f1", False),
    ("Total token throughput (tok/s)", lambda m: m.total_token_throughput_tok_s, "f1", True),
    ("Request throughput (req/s)", lambda m: m.request_throughput_rps, "f2", True),
    ("Request goodput (req/s)", lambda m: m.request_goodput_rps, "f2", True),
    ("Preemptions", lambda m: m.preemptions, "int", False),
    ("Recomputed tokens", lambda m: m.recomputed_tokens, "int", False),
    ("Prefix hit rate", lambda m: m.prefix_hit_rate, "pct", False),
    ("KV usage (mean)", lambda m: m.kv_usage_mean, "pct", False),
    ("SLO attainment", lambda m: m.slo_attainment, "pct", False),
    ("Goodput (req/s)", lambda m: m.goodput_rps, "f2", True),
    ("Goodput rate scale", lambda m: m.goodput_rate_scale, "f2", True),
    ("Jain fairness (tenant service)", lambda m: m.jain_fairness, "f3", True),
    ("Jain (tenant mean TTFT)", lambda m: m.jain_ttft, "f3", True),
    ("Policy errors", lambda m: m.policy_errors, "int", False),
    ("Duration (s)", lambda m: m.duration_s, "f1", False),
    ("Wall time (s)", lambda m: m.wall_s, "f2", False),
]


def _arms(results: Results) -> list[tuple[str, ArmMetrics]]:
    return [(arm.policy, arm.metrics) for arm in results.arms]


def metrics_table(results: Results) -> tuple[list[str], Rows]:
    """Side-by-side metrics: one row per metric, one column per arm."""
    arms = _arms(results)
    rows = [
        [label, *(fmt(read(m), kind) for _, m in arms)]
        for label, read, kind, optional in [
            *_SPECS[:_LATENCY_END],
            *_asked(arms),
            *_SPECS[_LATENCY_END:],
        ]
        if not optional or any(read(m) is not None for _, m in arms)
    ]
    return ["Metric", *(name for name, _ in arms)], rows


_LATENCY_END = 3 + len(_LATENCIES) * len(_PERCENTILES)  # the rows before: counts, latencies


def _extra(key: str) -> Callable[[Summary], float | None]:
    """Reads the percentile ``key`` (``p99.9``) that --metric-percentiles added."""
    return lambda summary: (summary.percentiles or {}).get(key)


def _asked(arms: list[tuple[str, ArmMetrics]]) -> list[tuple[str, Read, str, bool]]:
    """Rows of the percentiles ``--metric-percentiles`` added (``TTFT p99.9 (ms)``)."""
    out: list[tuple[str, Read, str, bool]] = []
    for label, summary in _LATENCIES:
        keys = dict.fromkeys(k for _, m in arms for k in summary(m).percentiles or {})
        for key in keys:
            out.append((f"{label} {key} (ms)", _percentile(summary, _extra(key)), "ms", False))
    return out


_GROUP_COLUMNS: list[tuple[str, Callable[[GroupMetrics], float | None], str]] = [
    ("Requests", lambda g: g.requests, "int"),
    ("Completed", lambda g: g.completed, "int"),
    ("Rejected", lambda g: g.rejected, "int"),
    ("TTFT p50 (ms)", lambda g: g.ttft_ms.p50, "ms"),
    ("TTFT p90 (ms)", lambda g: g.ttft_ms.p90, "ms"),
    ("TPOT p50 (ms)", lambda g: g.tpot_ms.p50, "ms"),
    ("Queue p90 (ms)", lambda g: g.queue_ms.p90, "ms"),
    ("Queue max (ms)", lambda g: g.queue_ms_max, "ms"),
    ("SLO attainment", lambda g: g.slo_attainment, "pct"),
    ("Output tok/s", lambda g: g.throughput_tok_s, "f1"),
    ("Done by deadline", lambda g: g.deadline_attainment, "pct"),
]


def group_table(results: Results, key: GroupKey, title: str) -> tuple[list[str], Rows]:
    """Per-tenant or per-priority rows (``key`` = ``tenants``/``priorities``), arm by arm."""
    arms = [
        (name, by_group)
        for name, m in _arms(results)
        if (by_group := groups_of(m, key)) is not None
    ]
    groups = sorted({g for _, by_group in arms for g in by_group}, key=group_order)
    rows = [
        [group, name, *(fmt(read(by_group[group]), kind) for _, read, kind in _GROUP_COLUMNS)]
        for group in groups
        for name, by_group in arms
        if group in by_group
    ]
    return [title, "Policy", *(label for label, _, _ in _GROUP_COLUMNS)], rows


_PHASE_NAMES = {
    "prefill_queue": "prefill queue",
    "prefill": "prefill",
    "decode_kv_wait": "until decode admits it (takes its KV blocks)",
    "link_wait": "waiting for the link",
    "transfer": "KV transfer",
    "decode_queue": "decode queue",
    "decode": "decode",
}


def phase_table(results: Results) -> tuple[list[str], Rows]:
    """Where a disaggregated arm's completed requests spent their time: one row per arm
    and phase, mean and percentiles in ms (no rows without a disaggregated arm)."""
    rows = []
    for name, m in _arms(results):
        if m.disaggregated is None:
            continue
        for key, summary in m.disaggregated.phases_ms.items():
            rows.append(
                [
                    _PHASE_NAMES.get(key, key),
                    name,
                    *(fmt(v, "ms") for v in (summary.mean, summary.p50, summary.p90, summary.p99)),
                ]
            )
    return ["Phase", "Policy", "mean (ms)", "p50 (ms)", "p90 (ms)", "p99 (ms)"], rows


def tables(results: Results) -> list[tuple[str, list[str], Rows]]:
    """The metrics tables ``(title, header, rows)``, empty ones left out."""
    out = [("All requests", *metrics_table(results))]
    out += [("Per tenant", *group_table(results, "tenants", "Tenant"))]
    out += [("Per priority", *group_table(results, "priorities", "Priority"))]
    out += [("Disaggregated: where time went", *phase_table(results))]
    return [(title, header, rows) for title, header, rows in out if rows]


def inline(value: Any) -> str:
    """A setting written for people: rounded numbers, ``key=value`` lists, no JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        return _round(value)
    if isinstance(value, Mapping):
        items = ", ".join(f"{k}={inline(v)}" for k, v in value.items())
        return f"({items})" if items else "none"
    if isinstance(value, list | tuple):
        return ", ".join(inline(v) for v in value) or "none"
    return str(value)


def value_parts(value: Any) -> list[str]:
    """A setting's value as parts: one, or the ``key=value`` items of a dict."""
    if isinstance(value, Mapping):
        return [f"{k}={inline(v)}" for k, v in value.items()] or ["none"]
    return [inline(value)]


@dataclass(frozen=True)
class SettingRow:
    """One setting: its value parts in each column, and whether the columns differ."""

    key: str
    cells: list[list[str]]
    differs: bool = False


@dataclass(frozen=True)
class SettingsTable:
    """A section of the settings: ``columns`` name the value columns (``Value``, or one
    per arm for an Engine table whose arms ran on different engines)."""

    title: str
    columns: list[str]
    rows: list[SettingRow]

    @property
    def differs(self) -> bool:
        return any(row.differs for row in self.rows)


def _section(title: str, section: Mapping[str, Any]) -> SettingsTable:
    rows = [SettingRow(str(key), [value_parts(value)]) for key, value in section.items()]
    return SettingsTable(title, ["Value"], rows)


def engine_table(results: Results) -> SettingsTable:
    """The Engine section: one column when every arm ran on the same engine, else one per
    arm with the settings that differ first, marked."""
    rows = engine_rows(results)
    if not any(row.differs for row in rows):
        engines = arm_engines(results)
        return _section("Engine", engines[0][1] if engines else results.engine)
    labels = [arm.policy for arm in results.arms]
    cells = [SettingRow(r.key, [value_parts(v) for v in r.values], r.differs) for r in rows]
    return SettingsTable("Engine", labels, cells)


def differing_table(results: Results) -> tuple[list[str], Rows]:
    """The engine settings that differ between arms, one column per arm: the first
    screen's "what ran"; no rows when the arms ran on the same engine."""
    rows = [[row.key, *(inline(v) for v in row.values)] for row in differing(results)]
    return ["Engine setting", *(arm.policy for arm in results.arms)], rows


def settings(results: Results) -> list[SettingsTable]:
    """The run's settings by section (workload, engine, SLO, policies, provenance), each
    with the keys results.json holds, in its order (the Engine section per arm when the
    arms ran on different engines)."""
    policies = {arm.policy: arm.config for arm in results.arms}
    provenance = {
        "schema_version": results.schema_version,
        **results.provenance.model_dump(exclude_unset=True),
    }
    out = [
        _section("Workload", results.workload.model_dump(exclude_unset=True)),
        engine_table(results),
        _section("SLO", results.slo.model_dump(exclude_unset=True)),
        _section("Policies", policies),
        _section("Provenance", provenance),
    ]
    return [table for table in out if table.rows]


def load_context(results: Results) -> str:
    """How the requests were sent: ``19,366 requests over 1,200 s at 4x rate``, ``400
    requests, all at 0 s, at most 32 in flight``."""
    w = results.workload
    if w.all_at_once:
        text = f"{w.requests:,} requests, all at 0 s"
    else:
        text = f"{w.requests:,} requests over {w.span_s:,.0f} s"
        if w.rate_scale != 1:
            text += f" at {inline(w.rate_scale)}x rate"
    if w.max_concurrency is not None:
        text += f", at most {w.max_concurrency:,} in flight"
    return text


def context(results: Results) -> str:
    """One line saying what was compared on what: arms, workload, engine, SLO."""
    names = [name for name, _ in _arms(results)]
    if not names:
        return "No arms."
    parts = [f"{', '.join(names[1:]) or names[0]} against {names[0]} (baseline)"]
    if len(names) == 1:
        parts = [f"{names[0]} alone"]
    slo = results.slo
    parts.append(f"{results.workload.name}: {load_context(results)}")
    if results.engine or any(engine for _, engine in arm_engines(results)):
        parts.append(engine_context(results))
    targets = [
        f"{label} ≤ {target:,.0f} ms"
        for target, label in ((slo.ttft_ms, "TTFT"), (slo.tpot_ms, "TPOT"))
        if target is not None
    ]
    if targets:
        parts.append("SLO " + ", ".join(targets))
    return " · ".join(parts)
