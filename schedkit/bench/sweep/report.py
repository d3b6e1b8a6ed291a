"""The sweep's reports: sweep.md (tables) and sweep.html (every arm's curves on one chart
per metric: the replicates' mean as a line, every probe point as a dot, intervals as
whiskers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from schedkit.bench.report.render import _CSS
from schedkit.bench.report.svg import line_chart
from schedkit.bench.sweep.spec import POINT_METRICS

__all__ = ["render_sweep_html", "render_sweep_markdown", "write_sweep_report"]

CHARTS = ("ttft_p90_ms", "tpot_p90_ms", "queue_p90_ms", "throughput_tok_s", "slo_attainment")
TABLE = ("ttft_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "queue_p90_ms", "throughput_tok_s",
         "slo_attainment")  # fmt: skip


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) < 1 and value != 0:
        return f"{value:.3f}"
    return f"{value:,.{digits}f}"


def _cell(stat: Mapping[str, Any], digits: int = 1) -> str:
    """``mean (low .. high)`` with the 95% interval, ``mean [min .. max]`` with the
    replicates' range where no interval was checked, else the mean."""
    mean, ci, spread = stat.get("mean"), stat.get("ci"), stat.get("range")
    if mean is None:
        return "-"
    if ci:
        return f"{_num(mean, digits)} ({_num(ci[0], digits)} .. {_num(ci[1], digits)})"
    if spread:
        return f"{_num(mean, digits)} [{_num(spread[0], digits)} .. {_num(spread[1], digits)}]"
    return _num(mean, digits)


LEGEND = (
    "(a .. b): 95% interval over replicates; [a .. b]: the replicates' range, where no"
    " interval's coverage was checked (SLO attainment, trace windows)"
)


def _knee(arm: Mapping[str, Any], rates: Sequence[float]) -> str:
    if arm["knee_rps"] is None:
        return f"none up to {_num(rates[-1], 2)} req/s"
    text = f"{_num(arm['knee_rps'], 2)} req/s"
    if arm.get("knee") and (arm["knee"].get("ci") or arm["knee"].get("range")):
        text += " (replicates: " + _cell(arm["knee"], 2) + ")"
    return text


def _goodput(arm: Mapping[str, Any]) -> str | None:
    if "goodput_by_replicate" not in arm:
        return None
    stat = arm.get("goodput_rps")
    if stat is not None:
        return _cell(stat, 2) + " req/s"
    sides = {g["censored"] for g in arm["goodput_by_replicate"] if g["censored"]}
    bounds = [g["bound"] for g in arm["goodput_by_replicate"] if g["censored"]]
    if sides == {"above"}:
        return f"above the highest rate probed ({_num(max(bounds), 2)} req/s) in some replicates"
    return f"below the lowest rate probed ({_num(min(bounds), 2)} req/s) in some replicates"


def render_sweep_markdown(results: Mapping[str, Any]) -> str:
    rule = results["rule"]
    spec = results["sweep"]
    parts = [
        "# schedkit sweep",
        "",
        f"{results['workload']['name']}, {results['workload']['requests_per_replicate']:,}"
        f" requests x {spec['replicates']} replicate(s), arrivals: {spec['arrivals']};"
        f" {results['engine']['model']} on {results['engine']['gpu']} (simulated).",
        "",
        f"- Knee: {rule['knee']}.",
        f"- Goodput: {rule['goodput']}.",
        f"- Intervals: {rule['interval']}. {LEGEND}.",
        "",
    ]
    for arm in results["arms"]:
        rates = arm["offered_rps"]
        parts += [f"## {arm['arm']}", "", f"Knee: {_knee(arm, rates)}."]
        goodput = _goodput(arm)
        if goodput:
            parts.append(f"Goodput: {goodput}.")
        parts.append("")
        header = ["offered req/s", *(POINT_METRICS[m][1] for m in TABLE), "overloaded"]
        parts += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for i, rate in enumerate(rates):
            over = sum(row[i] for row in arm["overloaded"])
            cells = [_num(rate, 2), *(_cell(arm["curves"][m][i]) for m in TABLE), f"{over}"]
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def _chart(results: Mapping[str, Any], metric: str) -> str:
    arms = results["arms"]
    series, dots, whiskers = [], [], []
    for arm in arms:
        xs = arm["offered_rps"]
        curve = arm["curves"][metric]
        series.append(
            (
                arm["arm"],
                [(x, c["mean"]) for x, c in zip(xs, curve, strict=True) if c["mean"] is not None],
            )
        )
        whiskers.append(
            [(x, c["ci"][0], c["ci"][1]) for x, c in zip(xs, curve, strict=True) if c.get("ci")]
        )
        points = [p for p in results["points"] if p["arm"] == arm["arm"] and p[metric] is not None]
        rate_x = dict(zip(sorted({p["rate"] for p in results["points"]}), xs, strict=True))
        dots.append([(rate_x[p["rate"]], p[metric]) for p in points])
    label = POINT_METRICS[metric][1]
    return line_chart(
        series, title=f"{label} vs offered load", x_label="offered requests/s", y_label=label,
        log_y=metric.endswith("_ms"), dots=dots, whiskers=whiskers,
    )  # fmt: skip


def render_sweep_html(results: Mapping[str, Any]) -> str:
    charts = [
        m for m in CHARTS if m != "slo_attainment" or "goodput_by_replicate" in results["arms"][0]
    ]
    figures = "".join(
        f'<figure id="{m}">{_chart(results, m)}<figcaption>Lines: the mean over replicates;'
        " dots: every probe point; bars: the intervals.</figcaption></figure>"
        for m in charts
    )
    summary = "".join(
        f"<li><b>{escape(a['arm'])}</b>: knee {escape(_knee(a, a['offered_rps']))}"
        + (f"; goodput {escape(g)}" if (g := _goodput(a)) else "")
        + "</li>"
        for a in results["arms"]
    )
    rule = results["rule"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedkit sweep</title><style>{_CSS}</style></head>\n<body>\n"
        f'<header><h1>schedkit sweep</h1><p class="context">{escape(results["workload"]["name"])}'
        f" on {escape(results['engine']['model'])}/{escape(results['engine']['gpu'])}</p></header>"
        f'<section class="summary"><h2>Knees and goodput</h2><ul>{summary}</ul>'
        f'<p class="method">Knee: {escape(rule["knee"])}. Goodput: {escape(rule["goodput"])}.'
        f" Intervals: {escape(rule['interval'])}. {escape(LEGEND)}.</p></section>"
        f'<section id="plots"><h2>Latency and throughput vs load</h2><div class="grid">{figures}'
        "</div></section>\n</body></html>\n"
    )


def write_sweep_report(out_dir: Path, results: Mapping[str, Any]) -> None:
    (out_dir / "sweep.md").write_text(render_sweep_markdown(results), encoding="utf-8")
    (out_dir / "sweep.html").write_text(render_sweep_html(results), encoding="utf-8")
