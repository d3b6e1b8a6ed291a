"""Render a bench's results as ``report.md`` and a self-contained ``report.html``.

The HTML file has no external scripts, styles or fonts: its plots are inline SVG drawn by
the small helper below, so the report opens anywhere and can be attached to an issue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from schedkit.bench.metrics import compare_arms, per_request_samples
from schedkit.bench.records import RunResult, TimelinePoint
from schedkit.bench.svg import Point, cdf_points, downsample, line_chart

__all__ = ["compare_arms", "render_html", "render_markdown", "write_report"]

Rows = list[list[str]]
NA = "n/a"

# ---------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------


def _get(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return NA
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "ms":
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{value:,.{int(kind[1:])}f}"  # "f<digits>"


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
        [label, *(_fmt(_get(m, path), kind) for _, m in arms)]
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


def _group_order(name: str) -> tuple[int, str]:
    # Priorities are numeric strings: sort "2" before "10"; tenants sort by name.
    return (int(name), "") if name.lstrip("-").isdigit() else (0, name)


def group_table(results: Mapping[str, Any], key: str, title: str) -> tuple[list[str], Rows]:
    """Per-tenant or per-priority rows (``key`` = ``tenants``/``priorities``), arm by arm."""
    arms = [(name, m[key]) for name, m in _arms(results) if isinstance(m.get(key), Mapping)]
    groups = sorted({g for _, by_group in arms for g in by_group}, key=_group_order)
    rows = [
        [group, name, *(_fmt(_get(by_group[group], p), kind) for _, p, kind in _GROUP_COLUMNS)]
        for group in groups
        for name, by_group in arms
        if group in by_group
    ]
    return [title, "Policy", *(label for label, _, _ in _GROUP_COLUMNS)], rows


def _settings(section: Any) -> Rows:
    if not isinstance(section, Mapping):
        return []
    rows = []
    for key, value in section.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        rows.append([str(key), text if len(text) <= 200 else text[:199] + "…"])
    return rows


def _verdicts(results: Mapping[str, Any]) -> Rows:
    """``[verdict, tone]`` for every compared metric; tone is better, worse or same."""
    tones = {True: "better", False: "worse", None: "same"}
    return [
        [str(row.get("verdict", "")), tones.get(row.get("better"), "same")]
        for comparison in results.get("comparisons", [])
        for row in comparison.get("metrics", [])
    ]


def sections(results: Mapping[str, Any]) -> list[tuple[str, list[str], Rows]]:
    """The report's ``(title, header, rows)`` tables in order, empty ones left out.

    The ``Comparisons`` section has no header; its rows are ``[verdict, tone]``.
    """
    out = [
        (title, ["Setting", "Value"], _settings(results.get(key)))
        for title, key in (("Workload", "workload"), ("Engine", "engine"), ("SLO", "slo"))
    ]
    out += [("Metrics", *metrics_table(results)), ("Comparisons", [], _verdicts(results))]
    out += [("Tenants", *group_table(results, "tenants", "Tenant"))]
    out += [("Priorities", *group_table(results, "priorities", "Priority"))]
    return [(title, header, rows) for title, header, rows in out if rows]


def _intro(results: Mapping[str, Any]) -> str:
    names = [name for name, _ in _arms(results)]
    return f"Policies: {', '.join(names)} (baseline: {names[0]})" if names else "No arms."


# ---------------------------------------------------------------------------
# markdown
# ---------------------------------------------------------------------------


_NUMBER = re.compile(r"^(n/a|[-+]?[\d,]*\.?\d+%?)$")


def _numeric(rows: Rows, column: int) -> bool:
    """Whether a column holds only numbers (right-aligned) rather than text."""
    return all(_NUMBER.match(row[column]) for row in rows)


def _md_table(header: list[str], rows: Rows) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    align = "|" + "|".join("---:" if _numeric(rows, i) else "---" for i in range(len(header)))
    return "\n".join([line(header), align + "|", *(line(row) for row in rows)])


def render_markdown(results: Mapping[str, Any]) -> str:
    """The whole report as Markdown (no plots)."""
    parts = ["# schedkit bench report", "", _intro(results), ""]
    for title, header, rows in sections(results):
        body = _md_table(header, rows) if header else "\n".join(f"- {v}" for v, _ in rows)
        parts += [f"## {title}", "", body, ""]
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# SVG plots
# ---------------------------------------------------------------------------


def plots(runs: Sequence[RunResult]) -> list[str]:
    """The report's SVG plots: TTFT and TPOT CDFs, waiting requests and KV usage over time."""
    samples = [per_request_samples(r) for r in runs]

    def cdf(key: str) -> list[tuple[str, Sequence[Point]]]:
        return [
            (r.policy, cdf_points(v for v in s[key] if v is not None))
            for r, s in zip(runs, samples, strict=True)
        ]

    def timeline(value: Callable[[TimelinePoint], float]) -> list[tuple[str, Sequence[Point]]]:
        return [(r.policy, downsample([(p.t, value(p)) for p in r.timeline])) for r in runs]

    pct = "requests (%, cumulative)"
    charts = [
        (cdf("ttft_ms"), "TTFT CDF", "TTFT (ms)", pct, True, 100.0),
        (cdf("tpot_ms"), "TPOT CDF", "TPOT (ms)", pct, True, 100.0),
        (timeline(_waiting), "Waiting requests over time", "time (s)", "waiting", False, None),
        (timeline(_kv_pct), "KV cache usage over time", "time (s)", "KV in use (%)", False, 100.0),
    ]
    return [
        line_chart(series, title=title, x_label=x, y_label=y, log_x=log, y_max=top)
        for series, title, x, y, log, top in charts
    ]


def _waiting(point: TimelinePoint) -> float:
    return float(point.waiting)


def _kv_pct(point: TimelinePoint) -> float:
    return point.kv_usage * 100.0


# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1400px;color:#222;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left} .num{text-align:right}
thead th{background:#f3f3f3}
tbody tr:nth-child(even){background:#fafafa}
.better{color:#1a7f37} .worse{color:#cf222e} .same{color:#555}
.plots{display:flex;flex-wrap:wrap;gap:1rem} .plot{background:#fff;border:1px solid #eee}
.plot .title{font-size:14px;font-weight:600} .plot .legend{font-size:12px}
.plot .tick{font-size:11px;fill:#555} .mid{text-anchor:middle} .end{text-anchor:end}
.plot .axis{font-size:12px;text-anchor:middle;fill:#333}
.plot .grid{stroke:#eee} .plot .frame{fill:none;stroke:#999} .plot .line{fill:none;stroke-width:1.8}
"""


def _html_table(header: list[str], rows: Rows) -> str:
    side = [' class="num"' if _numeric(rows, i) else "" for i in range(len(header))]
    head = "".join(f"<th{a}>{escape(h)}</th>" for a, h in zip(side, header, strict=True))
    body = "".join(
        "<tr>"
        + "".join(f"<td{a}>{escape(c)}</td>" for a, c in zip(side, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(results: Mapping[str, Any], runs: Sequence[RunResult]) -> str:
    """The whole report as one self-contained HTML page with inline SVG plots."""
    parts = ["<h1>schedkit bench report</h1>", f"<p>{escape(_intro(results))}</p>"]
    for title, header, rows in sections(results):
        if header:
            body = _html_table(header, rows)
        else:
            body = "<ul>" + "".join(f'<li class="{t}">{escape(v)}</li>' for v, t in rows) + "</ul>"
        parts += [f"<h2>{escape(title)}</h2>", body]
    if runs:
        parts += ["<h2>Plots</h2>", '<div class="plots">', *plots(runs), "</div>"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedkit bench report</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def write_report(
    out_dir: Path, results: dict[str, Any], runs: list[RunResult]
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` into ``out_dir``; return their paths.

    ``results`` is the bench's results.json content (``workload``, ``engine``, ``arms``,
    ``comparisons``); ``runs`` are the arms' raw results, in the same order, for plots.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    md, html = out_dir / "report.md", out_dir / "report.html"
    md.write_text(render_markdown(results), encoding="utf-8")
    html.write_text(render_html(results, runs), encoding="utf-8")
    return md, html
