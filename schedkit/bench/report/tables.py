"""The report's tables: metrics side by side, per tenant and priority, and the settings.

Cells are strings, formatted for people: latencies in ms with one decimal, rates as
percentages, settings rounded (``span_s`` 875.4) with nested ones as ``key=value`` lists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from schedkit.bench.report.plots import group_order

Rows = list[list[str]]
NA = "n/a"


def _get(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def fmt(value: Any, kind: str) -> str:
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


_LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))
# (label, path, format, shown only when some arm has a value)
_SPECS: list[tuple[str, tuple[str, ...], str, bool]] = [
    ("Requests", ("requests",), "int", False),
    ("Completed", ("completed",), "int", False),
    ("Rejected", ("rejected",), "int", False),
    *[
        (f"{label} {p} (ms)", (key, p), "ms", False)
        for key, label in (*_LATENCIES, ("queue_ms", "Queue"))
        for p in ("p50", "p90", "p99")
    ],
    ("Throughput (tok/s)", ("throughput_tok_s",), "f1", False),
    ("Preemptions", ("preemptions",), "int", False),
    ("Recomputed tokens", ("recomputed_tokens",), "int", False),
    ("Prefix hit rate", ("prefix_hit_rate",), "pct", False),
    ("KV usage (mean)", ("kv_usage_mean",), "pct", False),
    ("SLO attainment", ("slo_attainment",), "pct", False),
    ("Goodput (req/s)", ("goodput_rps",), "f2", True),
    ("Goodput rate scale", ("goodput_rate_scale",), "f2", True),
    ("Jain fairness (tenant service)", ("jain_fairness",), "f3", True),
    ("Jain (tenant mean TTFT)", ("jain_ttft",), "f3", True),
    ("Policy errors", ("policy_errors",), "int", False),
    ("Duration (s)", ("duration_s",), "f1", False),
    ("Wall time (s)", ("wall_s",), "f2", False),
]


def _arms(results: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(str(a["policy"]), a.get("metrics", {})) for a in results.get("arms", [])]


def metrics_table(results: Mapping[str, Any]) -> tuple[list[str], Rows]:
    """Side-by-side metrics: one row per metric, one column per arm."""
    arms = _arms(results)
    rows = [
        [label, *(fmt(_get(m, path), kind) for _, m in arms)]
        for label, path, kind, optional in _SPECS
        if not optional or any(_get(m, path) is not None for _, m in arms)
    ]
    return ["Metric", *(name for name, _ in arms)], rows


_GROUP_COLUMNS: list[tuple[str, tuple[str, ...], str]] = [
    ("Requests", ("requests",), "int"),
    ("Completed", ("completed",), "int"),
    ("Rejected", ("rejected",), "int"),
    ("TTFT p50 (ms)", ("ttft_ms", "p50"), "ms"),
    ("TTFT p90 (ms)", ("ttft_ms", "p90"), "ms"),
    ("TPOT p50 (ms)", ("tpot_ms", "p50"), "ms"),
    ("Queue p90 (ms)", ("queue_ms", "p90"), "ms"),
    ("Queue max (ms)", ("queue_ms_max",), "ms"),
    ("SLO attainment", ("slo_attainment",), "pct"),
]


def group_table(results: Mapping[str, Any], key: str, title: str) -> tuple[list[str], Rows]:
    """Per-tenant or per-priority rows (``key`` = ``tenants``/``priorities``), arm by arm."""
    arms = [(name, m[key]) for name, m in _arms(results) if isinstance(m.get(key), Mapping)]
    groups = sorted({g for _, by_group in arms for g in by_group}, key=group_order)
    rows = [
        [group, name, *(fmt(_get(by_group[group], p), kind) for _, p, kind in _GROUP_COLUMNS)]
        for group in groups
        for name, by_group in arms
        if group in by_group
    ]
    return [title, "Policy", *(label for label, _, _ in _GROUP_COLUMNS)], rows


def tables(results: Mapping[str, Any]) -> list[tuple[str, list[str], Rows]]:
    """The metrics tables ``(title, header, rows)``, empty ones left out."""
    out = [("All requests", *metrics_table(results))]
    out += [("Per tenant", *group_table(results, "tenants", "Tenant"))]
    out += [("Per priority", *group_table(results, "priorities", "Priority"))]
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


Setting = tuple[str, list[str]]  # (key, value parts: one, or key=value items of a dict)


def _setting_rows(section: Any) -> list[Setting]:
    if not isinstance(section, Mapping):
        return []
    return [
        (
            str(key),
            [f"{k}={inline(v)}" for k, v in value.items()] or ["none"]
            if isinstance(value, Mapping)
            else [inline(value)],
        )
        for key, value in section.items()
    ]


def settings(results: Mapping[str, Any]) -> list[tuple[str, list[Setting]]]:
    """The run's settings by section (workload, engine, SLO, policies, provenance)."""
    policies = {
        str(a.get("policy", "?")): a.get("config")
        for a in results.get("arms", [])
        if isinstance(a, Mapping) and a.get("config") is not None
    }
    provenance = dict(results.get("provenance") or {})
    if "schema_version" in results:
        provenance = {"schema_version": results["schema_version"], **provenance}
    out = [
        ("Workload", _setting_rows(results.get("workload"))),
        ("Engine", _setting_rows(results.get("engine"))),
        ("SLO", _setting_rows(results.get("slo"))),
        ("Policies", _setting_rows(policies)),
        ("Provenance", _setting_rows(provenance)),
    ]
    return [(title, rows) for title, rows in out if rows]


def context(results: Mapping[str, Any]) -> str:
    """One line saying what was compared on what: arms, workload, engine, SLO."""
    names = [name for name, _ in _arms(results)]
    if not names:
        return "No arms."
    parts = [f"{', '.join(names[1:]) or names[0]} against {names[0]} (baseline)"]
    if len(names) == 1:
        parts = [f"{names[0]} alone"]
    w, e, slo = (results.get(k) or {} for k in ("workload", "engine", "slo"))
    if w:
        text = str(w.get("name", "workload"))
        if isinstance(w.get("requests"), int):
            text += f": {w['requests']:,} requests"
        if isinstance(w.get("span_s"), int | float):
            text += f" over {w['span_s']:,.0f} s"
        if w.get("rate_scale") not in (None, 1, 1.0):
            text += f" at {inline(w['rate_scale'])}x rate"
        parts.append(text)
    if e:
        where = " on ".join(str(e[k]) for k in ("model", "gpu") if e.get(k))
        tp = f", tp {e['tp']}" if isinstance(e.get("tp"), int) and e["tp"] > 1 else ""
        parts.append(f"{e.get('engine', 'engine')}{': ' + where if where else ''}{tp}")
    targets = [
        f"{label} ≤ {slo[key]:,.0f} ms"
        for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))
        if isinstance(slo.get(key), int | float)
    ]
    if targets:
        parts.append("SLO " + ", ".join(targets))
    return " · ".join(parts)
