"""The sweep's reports: sweep.md and sweep.html.

Both open with the answer: each arm's knee, one figure with its interval, and its
goodput. sweep.html then draws every arm's curves on one chart per metric (the
replicates' mean as a line, every probe point as a dot, intervals as whiskers; the knee
and the goodput marked, the SLOs and the attainment target as dashed lines), and both
end with every rate's table.

The knee shown is the mean of the replicates' own knees (``knee`` in sweep.json), the
figure whose interval's coverage is checked; with one replicate it is the knee of the
curve (``knee_rps``). A replicate that reaches no knee in the rates probed makes the
figure a bound, said in words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from schedkit.bench.report.render import _CSS
from schedkit.bench.report.svg import MARK_CSS, line_chart
from schedkit.bench.sweep.spec import POINT_METRICS

__all__ = [
    "goodput_figure",
    "knee_figure",
    "render_sweep_html",
    "render_sweep_markdown",
    "write_sweep_report",
]

CHARTS = ("ttft_p90_ms", "tpot_p90_ms", "queue_p90_ms", "throughput_tok_s", "slo_attainment")
TABLE = ("ttft_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "queue_p90_ms", "throughput_tok_s",
         "slo_attainment")  # fmt: skip
NO_SLO = "not measured: no SLO given (--slo-ttft-ms, --slo-tpot-ms)"
OVERLOADED = "overloaded replicates"
Arm = Mapping[str, Any]


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) < 1 and value != 0:
        return f"{value:.3f}"
    return f"{value:,.{0 if abs(value) >= 1000 else digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cell(stat: Mapping[str, Any], share: bool = False) -> tuple[str, str]:
    """A curve's point: its mean (``share``: as a percentage), and ``(low .. high)``, the
    95% interval, or ``[min .. max]``, the replicates' range where no interval was checked
    (else empty)."""
    show = _share if share else _num
    mean, ci, spread = stat.get("mean"), stat.get("ci"), stat.get("range")
    if mean is None:
        return "-", ""
    if ci:
        return show(mean), f"({show(ci[0])} .. {show(ci[1])})"
    if spread and show(spread[0]) != show(spread[1]):
        return show(mean), f"[{show(spread[0])} .. {show(spread[1])}]"
    return show(mean), ""


LEGEND = (
    "(a .. b): 95% interval over replicates; [a .. b]: the replicates' range, where no"
    " interval's coverage was checked (SLO attainment, trace windows)"
)
DASH = "-: no value (no request finished at that rate, in at least one replicate)"
OVERLOAD_NOTE = (
    f"{OVERLOADED}: how many replicates' runs were flagged overloaded (arrivals outpaced"
    " completions: latencies there measure the backlog)"
)


def _spread(stat: Mapping[str, Any], values: Sequence[float]) -> str:
    """How far the replicates' figure can be trusted: its interval, their range, or why
    there is neither ("" for one replicate)."""
    n = len(values)
    if n < 2:
        return ""
    if stat.get("ci"):
        return f" (95% interval {_num(stat['ci'][0], 2)} .. {_num(stat['ci'][1], 2)})"
    if min(values) == max(values):
        return f" (the same in all {n} replicates)"
    if stat.get("range"):
        low, high = stat["range"]
        return f" (range over the {n} replicates {_num(low, 2)} .. {_num(high, 2)})"
    return f" (no interval: {n} replicates; 3 or more give one)"


def knee_figure(arm: Arm) -> tuple[float | None, str]:
    """The arm's knee, one figure (where to mark it, or None) and its words: the mean
    of the replicates' knees with its interval, or the bound when some reach none."""
    per: list[float | None] = arm["knee_by_replicate"]
    n, top = len(per), _num(arm["offered_rps"][-1], 2)
    found = [k for k in per if k is not None]
    if found and len(found) == n:
        mean = float(arm["knee"]["mean"])
        return mean, f"{_num(mean, 2)} req/s" + _spread(arm["knee"], found)
    if not found:
        every = f" in any of the {n} replicates" if n > 1 else ""
        return None, f"none up to {top} req/s (the highest rate probed){every}"
    bound = (sum(found) + arm["offered_rps"][-1] * (n - len(found))) / n
    return bound, (
        f"at least {_num(bound, 2)} req/s ({n - len(found)} of {n} replicates reach none up"
        f" to {top} req/s, the highest rate probed; no interval)"
    )


def _knee(arm: Arm, rates: Sequence[float]) -> str:
    """The knee's words (the command's table)."""
    return knee_figure(arm)[1]


def goodput_figure(arm: Arm) -> tuple[float | None, str]:
    """The arm's goodput, one figure (where to mark it, or None) and its words: the mean
    over replicates with its interval, which side of the rates probed it lies on, or
    the bound when it lies outside them in some replicates; why not, without an SLO."""
    if "goodput_by_replicate" not in arm:
        return None, NO_SLO
    per = arm["goodput_by_replicate"]
    n, rates = len(per), arm["offered_rps"]
    values = [float(g["value"]) for g in per if g["value"] is not None]
    if len(values) == n:
        stat = arm["goodput_rps"]
        return float(stat["mean"]), f"{_num(stat['mean'], 2)} req/s" + _spread(stat, values)
    above = sum(g["censored"] == "above" for g in per)
    below = sum(g["censored"] == "below" for g in per)
    top, low = _num(rates[-1], 2), _num(rates[0], 2)
    every = f" in all {n} replicates" if n > 1 else ""
    if above == n:
        never = f" in any of the {n} replicates" if n > 1 else ""
        return None, (
            f"above {top} req/s, the highest rate probed (SLO attainment never fell under the"
            f" target there{never})"
        )
    if below == n:
        return None, (
            f"below {low} req/s, the lowest rate probed (SLO attainment was under the target"
            f" there already{every})"
        )
    if not below:
        bound = (sum(values) + rates[-1] * above) / n
        return bound, (
            f"at least {_num(bound, 2)} req/s ({above} of {n} replicates never fall under the"
            f" target up to {top} req/s, the highest rate probed; no interval)"
        )
    if not above:
        bound = (sum(values) + rates[0] * below) / n
        return bound, (
            f"at most {_num(bound, 2)} req/s ({below} of {n} replicates are under the target"
            f" already at {low} req/s, the lowest rate probed; no interval)"
        )
    return None, (
        f"no figure: {above} of {n} replicates never fall under the target up to {top} req/s,"
        f" {below} are under it already at {low} req/s"
    )


def _goodput(arm: Arm) -> str:
    """The goodput's words (the command's table)."""
    return goodput_figure(arm)[1]


def _has_slo(results: Mapping[str, Any]) -> bool:
    return any(v is not None for v in results["slo"].values())


def _context(results: Mapping[str, Any]) -> str:
    """What the sweep ran: the workload, replicates, arrivals, engine, SLOs and arms."""
    spec, slo = results["sweep"], results["slo"]
    slos = [
        f"{k} {slo[f'{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if slo[f"{k.lower()}_ms"]
    ]
    arms = "; ".join(
        name + (f" ({', '.join(f'{k}={v}' for k, v in over.items())})" if over else "")
        for name, over in results["arm_settings"].items()
    )
    engine = results["engine"]
    bench = results.get("provenance", {}).get("spec", {}).get("workload", {})
    limit = bench.get("max_concurrency")
    return (
        f"{results['workload']['name']}: {results['workload']['requests_per_replicate']:,}"
        f" requests x {spec['replicates']} replicate{'s' if spec['replicates'] != 1 else ''},"
        f" arrivals: {spec['arrivals']}"
        f"{f', at most {limit:,} in flight' if limit is not None else ''};"
        f" {engine['model']} on {engine['gpu']}"
        f" (simulated); SLOs: {', '.join(slos) or 'none'}. Arms: {arms}."
    )


def _summary_header(results: Mapping[str, Any]) -> list[str]:
    goodput = f"goodput (SLO attainment {results['sweep']['attainment']:.0%})"
    return ["arm", "knee", *([goodput] if _has_slo(results) else [])]


def _summary_rows(results: Mapping[str, Any]) -> list[list[str]]:
    slo = _has_slo(results)
    return [
        [a["arm"], knee_figure(a)[1], *([goodput_figure(a)[1]] if slo else [])]
        for a in results["arms"]
    ]


def _methods(results: Mapping[str, Any]) -> list[str]:
    rule, spec = results["rule"], results["sweep"]
    if spec["replicates"] == 1:
        intervals = (
            "none with one replicate (--replicates 3 or more with --arrivals poisson give"
            " 95% intervals)"
        )
    elif spec["arrivals"] == "trace":
        intervals = (
            "the replicates' range (trace windows: no interval's coverage was checked;"
            " --arrivals poisson gives 95% intervals)"
        )
    else:
        intervals = rule["interval"]
    return [
        f"Knee: {rule['knee']}.",
        f"Goodput: {rule['goodput']}." if _has_slo(results) else f"Goodput: {NO_SLO}.",
        f"Intervals: {intervals}.",
    ]


def _notes(results: Mapping[str, Any], dash: bool) -> list[str]:
    """What the rate tables' marks mean: intervals (with replicates), the overload count,
    and ``-`` where one is shown."""
    legend = [LEGEND] if results["sweep"]["replicates"] > 1 else []
    return [f"{note}." for note in [*legend, OVERLOAD_NOTE, *([DASH] if dash else [])]]


def _rate_header(results: Mapping[str, Any]) -> list[str]:
    metrics = [m for m in TABLE if m != "slo_attainment" or _has_slo(results)]
    return ["offered req/s", *(POINT_METRICS[m][1] for m in metrics), OVERLOADED]


def _rate_rows(results: Mapping[str, Any], arm: Arm) -> list[list[tuple[str, str]]]:
    """Every rate of one arm: cells of (mean, interval or range)."""
    metrics = [m for m in TABLE if m != "slo_attainment" or _has_slo(results)]
    rows = []
    for i, rate in enumerate(arm["offered_rps"]):
        over = sum(row[i] for row in arm["overloaded"])
        cells = [_cell(arm["curves"][m][i], m == "slo_attainment") for m in metrics]
        rows.append([(_num(rate, 2), ""), *cells, (f"{over} of {len(arm['overloaded'])}", "")])
    return rows


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_sweep_markdown(results: Mapping[str, Any]) -> str:
    header = _summary_header(results)
    parts = ["# schedkit sweep", "", _context(results), "", "## Knee and goodput", ""]
    parts += [_md_row(header), "|---|" + "---|" * (len(header) - 1)]
    parts += [_md_row(row) for row in _summary_rows(results)]
    parts += ["", *(f"- {line}" for line in _methods(results)), ""]
    dash = False
    for arm in results["arms"]:
        rates = _rate_header(results)
        parts += [f"## {arm['arm']}", "", _md_row(rates), "|" + "---:|" * len(rates)]
        for row in _rate_rows(results, arm):
            dash = dash or any(mean == "-" for mean, _ in row)
            parts.append(_md_row([f"{mean} {extra}".strip() for mean, extra in row]))
        parts.append("")
    parts += [*_notes(results, dash), ""]
    return "\n".join(parts)


def _levels(results: Mapping[str, Any], metric: str) -> list[tuple[float, str]]:
    """The dashed horizontal lines of a chart: the SLO it is judged by, or the target."""
    slo = results["slo"]
    if metric == "ttft_p90_ms" and slo["ttft_ms"]:
        return [(slo["ttft_ms"], f"TTFT SLO {slo['ttft_ms']:,.0f} ms")]
    if metric == "tpot_p90_ms" and slo["tpot_ms"]:
        return [(slo["tpot_ms"], f"TPOT SLO {slo['tpot_ms']:,.0f} ms")]
    if metric == "slo_attainment":
        target = results["sweep"]["attainment"]
        return [(target, f"target {target:.0%}")]
    return []


def _markers(results: Mapping[str, Any], metric: str) -> list[tuple[float, str]]:
    """The dashed vertical lines of a chart: each arm's knee on p90 TTFT's (the curve
    that defines it), each arm's goodput on SLO attainment's."""
    figure = {"ttft_p90_ms": ("knee", knee_figure), "slo_attainment": ("goodput", goodput_figure)}
    if metric not in figure:
        return []
    word, find = figure[metric]
    marks = [(x, a["arm"]) for a in results["arms"] if (x := find(a)[0]) is not None]
    return [(x, f"{word} {_short(name)} {_num(x, 1)}") for x, name in marks]


def _short(name: str) -> str:
    return name if len(name) <= 14 else name[:13] + "…"


def _chart(results: Mapping[str, Any], metric: str) -> str:
    series, dots, whiskers = [], [], []
    for arm in results["arms"]:
        xs = arm["offered_rps"]
        curve = arm["curves"][metric]
        pairs = list(zip(xs, curve, strict=True))
        series.append((arm["arm"], [(x, c["mean"]) for x, c in pairs if c["mean"] is not None]))
        whiskers.append([(x, c["ci"][0], c["ci"][1]) for x, c in pairs if c.get("ci")])
        points = [p for p in results["points"] if p["arm"] == arm["arm"] and p[metric] is not None]
        rate_x = dict(zip(sorted({p["rate"] for p in results["points"]}), xs, strict=True))
        dots.append([(rate_x[p["rate"]], p[metric]) for p in points])
    label = POINT_METRICS[metric][1]
    return line_chart(
        series, title=f"{label} vs offered load", x_label="offered requests/s", y_label=label,
        log_y=metric.endswith("_ms"), dots=dots, whiskers=whiskers,
        levels=_levels(results, metric), references=_markers(results, metric),
        y_min=0.0 if metric == "slo_attainment" else None,
        y_max=1.0 if metric == "slo_attainment" else None,
    )  # fmt: skip


def _prose(text: str) -> str:
    """``text`` as HTML, each command-line flag in it kept on one line."""
    return re.sub(r"(--[a-z][a-z-]*)", r"<code>\1</code>", escape(text))


def _html_table(
    header: Sequence[str], rows: Sequence[Sequence[tuple[str, str]]], table_id: str, num: bool
) -> str:
    side = [' class="num"' if num and i else "" for i in range(len(header))]
    head = "".join(f"<th{a}>{escape(h)}</th>" for a, h in zip(side, header, strict=True))
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{a}>{escape(mean)}" + (f'<br><span class="ci">{escape(extra)}</span>' if extra else "")
            + "</td>"
            for a, (mean, extra) in zip(side, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )  # fmt: skip
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


PAGE_CSS = (
    MARK_CSS + " .ci{font-size:.75rem;color:#57606a} .num{white-space:normal}"
    " code{white-space:nowrap;font-size:.9em} #knees td:first-child{font-weight:600}"
    " #knees{width:auto}"
    " @media (max-width:900px){table{font-size:.75rem} th,td{padding:.2rem .25rem}"
    " .summary{padding:.75rem .6rem}}"
)


def _caption(results: Mapping[str, Any], metric: str) -> str:
    """What a chart shows, its dashed lines included (only those drawn)."""
    dashed = []
    if _markers(results, metric):
        dashed.append("each arm's " + ("knee" if metric == "ttft_p90_ms" else "goodput"))
    for _, label in _levels(results, metric):
        dashed.append("the " + label.split(" SLO")[0] + " SLO" if "SLO" in label else "the target")
    return (
        "Lines: the mean over replicates; dots: every probe point; bars: the intervals"
        + (f"; dashed: {' and '.join(dashed)}" if dashed else "")
        + "."
    )


def _figures(results: Mapping[str, Any]) -> str:
    charts = [m for m in CHARTS if m != "slo_attainment" or _has_slo(results)]
    return "".join(
        f'<figure id="{m}">{_chart(results, m)}<figcaption>{escape(_caption(results, m))}'
        "</figcaption></figure>"
        for m in charts
    )


def render_sweep_html(results: Mapping[str, Any]) -> str:
    summary = [[(cell, "") for cell in row] for row in _summary_rows(results)]
    rows = [_rate_rows(results, a) for a in results["arms"]]
    tables = "".join(
        f"<h3>{escape(a['arm'])}</h3>"
        + _html_table(_rate_header(results), arm_rows, f"rates-{i}", True)
        for i, (a, arm_rows) in enumerate(zip(results["arms"], rows, strict=True))
    )
    dash = any(mean == "-" for arm_rows in rows for row in arm_rows for mean, _ in row)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>schedkit sweep</title><style>{_CSS}{PAGE_CSS}</style></head>\n<body>\n"
        f'<header><h1>schedkit sweep</h1><p class="context">{_prose(_context(results))}</p>'
        "</header>\n"
        f'<section id="answer" class="summary"><h2>Knee and goodput</h2>'
        f"{_html_table(_summary_header(results), summary, 'knees', False)}"
        f'<p class="method">{_prose(" ".join(_methods(results)))}</p></section>\n'
        f'<section id="plots"><h2>Latency and throughput vs load</h2><div class="grid">'
        f"{_figures(results)}</div></section>\n"
        f'<section id="rates"><h2>Every rate</h2>{tables}'
        f'<p class="method">{_prose(" ".join(_notes(results, dash)))}</p></section>\n'
        "</body></html>\n"
    )


def write_sweep_report(out_dir: Path, results: Mapping[str, Any]) -> None:
    (out_dir / "sweep.md").write_text(render_sweep_markdown(results), encoding="utf-8")
    (out_dir / "sweep.html").write_text(render_sweep_html(results), encoding="utf-8")
