"""Render a bench's results as ``report.md`` and a self-contained ``report.html``.

Both read in the same order: what ran (the engine settings the arms differ in, side by
side), the summary (flags, then each comparison's verdicts, regressions before gains),
then the plots (HTML only) and the metrics tables, and last the settings the run used,
folded away in the HTML page. A verdict reads the same everywhere: its name in the
headline, the table and the badge is results.json's ``tone``. The page has no external
scripts, styles or fonts: its plots are inline SVG (:mod:`schedkit.bench.report.plots`), so it
opens anywhere and can be attached to an issue.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from schedkit.bench.report.plots import Figure, figures
from schedkit.bench.report.tables import (
    NA,
    Rows,
    SettingsTable,
    context,
    differing_table,
    settings,
    tables,
)
from schedkit.bench.report.verdicts import ComparisonSummary, Flag, comparison_summaries, run_flags
from schedkit.bench.results import TONES, WORSE, Results
from schedkit.bench.stats.request_table import RequestTable
from schedkit.records import RunResult

__all__ = ["render_html", "render_markdown", "write_report"]

_NUMBER = re.compile(r"^(n/a|[-+]?[\d,]*\.?\d+(%| ms| s| pp)?)$")


def numeric(rows: Rows, column: int) -> bool:
    """Whether a column holds only numbers (right-aligned) rather than text."""
    return bool(rows) and all(_NUMBER.match(row[column]) for row in rows)


def verdict_table(summary: ComparisonSummary) -> tuple[list[str], Rows]:
    """The verdict rows of one comparison: tone, metric, both values, change and interval."""
    ci = f"{summary.confidence * 100:g}% CI"
    header = ["Verdict", "Metric", summary.baseline, summary.policy, "Change", ci]
    rows = [[v.tone, v.label, v.a, v.b, v.change, v.ci] for v in summary.verdicts]
    return header, rows


def _headline(summary: ComparisonSummary) -> str:
    """The headline without its leading ``"B vs A: "``, which the heading above says."""
    prefix = f"{summary.title}: "
    text = summary.headline
    return text[len(prefix) :] if text.startswith(prefix) else text


def tone_class(tone: str) -> str:
    """A verdict's name as a CSS class: ``no meaningful difference`` is
    ``no-meaningful-difference``."""
    return tone.replace(" ", "-")


def _tally(summary: ComparisonSummary) -> str:
    """``1 worse · 2 better``: how many verdicts of each tone, in the summary's order."""
    counts = [(t, sum(v.tone == t for v in summary.verdicts)) for t in TONES]
    return " · ".join(f"{n} {t}" for t, n in counts if n)


# ---------------------------------------------------------------------------
# markdown
# ---------------------------------------------------------------------------


def _md_table(header: list[str], rows: Rows) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    align = "|" + "|".join("---:" if numeric(rows, i) else "---" for i in range(len(header)))
    return "\n".join([line(header), align + "|", *(line(row) for row in rows)])


def _md_flag(flag: Flag) -> str:
    mark = "**ALERT**" if flag.level == "alert" else "**warning**"
    kind = "" if flag.kind == "warning" else f"{flag.kind}: "
    return f"- {mark} {kind}{flag.message}"


def _md_differing(results: Results) -> list[str]:
    """What the arms ran differently, under the context line; nothing when alike."""
    header, rows = differing_table(results)
    if not rows:
        return []
    return ["**Engine settings that differ between arms:**", "", _md_table(header, rows), ""]


def _md_settings(table: SettingsTable) -> list[str]:
    """One settings section; with a column per arm, the differing rows in bold."""
    bold = [
        [f"**{row.key}**", *(f"**{', '.join(c)}**" for c in row.cells)]
        if row.differs
        else [row.key, *(", ".join(c) for c in row.cells)]
        for row in table.rows
    ]
    note = ["_In bold: the settings the arms differ in._", ""] if table.differs else []
    return [f"### {table.title}", "", *note, _md_table(["Setting", *table.columns], bold), ""]


def render_markdown(results: Results) -> str:
    """The whole report as Markdown (no plots): what ran and the summary first, settings
    last."""
    parts = ["# schedkit bench report", "", context(results), ""]
    parts += [*_md_differing(results), "## Summary", ""]
    flags = run_flags(results)
    parts += [*(_md_flag(f) for f in flags), ""] if flags else []
    summaries = comparison_summaries(results)
    if not summaries:
        parts += ["One arm: nothing to compare.", ""]
    for s in summaries:
        header, rows = verdict_table(s)
        rows = [[f"**{r[0]}**" if r[0] == WORSE else r[0], *r[1:]] for r in rows]
        parts += [f"### {s.title}", "", f"**{_headline(s)}**", ""]
        parts += [*(_md_flag(f) for f in s.flags), ""] if s.flags else []
        parts += [_md_table(header, rows), "", f"_{s.method}._", ""] if rows else []
    parts += ["## Metrics", ""]
    for title, header, rows in tables(results):
        parts += [f"### {title}", "", _md_table(header, rows), ""]
    sections = settings(results)
    parts += ["## Settings", ""] if sections else []
    for table in sections:
        parts += _md_settings(table)
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5rem auto;max-width:1400px;
 color:#1f2328;padding:0 1rem;line-height:1.4}
h1{font-size:1.6rem;margin:0 0 .25rem} h2{font-size:1.25rem;margin:2rem 0 .75rem}
h3{font-size:1.05rem;margin:0 0 .4rem} .context{color:#57606a;margin:0 0 1rem}
.grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:1rem;align-items:start}
.grid.wide-right{grid-template-columns:minmax(0,1fr) minmax(0,2fr)}
.compact table{font-size:.8rem} .compact th,.compact td{padding:.2rem .4rem}
@media (max-width:900px){.grid,.grid.wide-right{grid-template-columns:1fr} .verdicts .num{white-space:normal}}
table{border-collapse:collapse;font-size:.88rem;width:100%}
th,td{border:1px solid #d8dee4;padding:.25rem .55rem;text-align:left;vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
thead th{background:#f6f8fa} tbody tr:nth-child(even){background:#fafbfc}
.scroll{overflow-x:auto} th.num{white-space:normal} .card{margin-bottom:1rem}
.summary{border:2px solid #d0d7de;border-radius:8px;padding:1rem 1.25rem;background:#f6f8fa}
.summary h2{margin-top:0}
.comparison{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:.8rem 1rem;margin:.75rem 0}
.headline{font-size:1.05rem;font-weight:600;margin:.2rem 0 .6rem}
.tally{font-weight:400;font-size:.85rem;margin-left:.5rem}
.flags{list-style:none;padding:0;margin:.5rem 0}
.flag{padding:.45rem .7rem;margin:.3rem 0;border-radius:4px;border-left:5px solid;font-weight:500}
.flag.alert{background:#ffebe9;border-color:#cf222e;color:#82071e}
.flag.warn{background:#fff8c5;border-color:#bf8700;color:#633c01}
.flag .kind{font-weight:700;text-transform:uppercase;font-size:.8rem;margin-right:.4rem}
.badge{display:inline-block;padding:.05rem .5rem;border-radius:1rem;font-weight:700;font-size:.75rem;
 color:#fff;background:#6e7781;white-space:nowrap}
.badge.worse{background:#cf222e} .badge.better{background:#1a7f37}
.badge.inconclusive{background:#9a6700} .badge.no-meaningful-difference{background:#6e7781}
tr.worse td{background:#ffebe9} tr.better td{background:#dafbe1}
tr.inconclusive td{background:#fff8c5} tr.no-meaningful-difference td{background:#fff}
.ran{margin:0 0 1rem} .ran table{width:auto} .ran caption{text-align:left;
 font-weight:600;font-size:.9rem;margin-bottom:.25rem}
tr.differs th,tr.differs td{background:#ddf4ff;font-weight:600}
#settings tr.differs th::after{content:" differs";font-family:system-ui,sans-serif;font-size:.7rem;
 color:#0969da;margin-left:.4rem}
.method{color:#57606a;font-size:.8rem;margin:.4rem 0 0}
figure{margin:0;border:1px solid #d8dee4;border-radius:6px;padding:.5rem;background:#fff}
figcaption{font-size:.8rem;color:#57606a;margin:.2rem .3rem}
svg.plot{width:100%;height:auto;display:block}
.plot .title{font-size:14px;font-weight:600} .plot .legend{font-size:12px}
.plot .tick{font-size:11px;fill:#57606a} .mid{text-anchor:middle} .end{text-anchor:end}
.plot .axis{font-size:12px;text-anchor:middle;fill:#333}
.plot .grid{stroke:#eee} .plot .frame{fill:none;stroke:#999} .plot .line{fill:none;stroke-width:1.8}
.plot .ref{stroke:#57606a;stroke-dasharray:4 3} .plot .dots{fill-opacity:.4}
details{border:1px solid #d8dee4;border-radius:6px;padding:.5rem 1rem;margin-top:2rem}
details>summary{cursor:pointer;font-weight:600;font-size:1.1rem}
#settings th{font-weight:500;font-family:ui-monospace,monospace;font-size:.8rem;width:32%}
.kv{display:inline-block;margin:.05rem .4rem .05rem 0;padding:0 .35rem;white-space:nowrap;
 background:#f6f8fa;border:1px solid #e5e7eb;border-radius:3px}
"""


def _html_table(header: list[str], rows: Rows) -> str:
    side = [' class="num"' if numeric(rows, i) else "" for i in range(len(header))]
    head = "".join(f"<th{a}>{escape(h)}</th>" for a, h in zip(side, header, strict=True))
    body = "".join(
        "<tr>"
        + "".join(f"<td{a}>{escape(c)}</td>" for a, c in zip(side, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(cell: str) -> bool:
    """Whether a verdict cell is a figure (a value, change or interval), set to the right."""
    return cell == NA or cell[:1] in "+-0123456789"


def _html_verdicts(s: ComparisonSummary) -> str:
    """The verdict table: one row per metric, coloured by tone, a badge in front; a
    reason for no interval reads as text, from the left."""
    header, rows = verdict_table(s)
    side = ["", "", *(' class="num"' for _ in header[2:])]
    head = "".join(f"<th{a}>{escape(h)}</th>" for a, h in zip(side, header, strict=True))
    body = "".join(
        f'<tr class="{tone_class(row[0])}" title="{escape(v.text)}">'
        f'<td><span class="badge {tone_class(row[0])}">{escape(row[0])}</span></td>'
        + "".join(
            f"<td{a if _figure(c) else ''}>{escape(c)}</td>"
            for a, c in zip(side[1:], row[1:], strict=True)
        )
        + "</tr>"
        for v, row in zip(s.verdicts, rows, strict=True)
    )
    return f'<table class="verdicts"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _html_flags(flags: Sequence[Flag]) -> str:
    if not flags:
        return ""
    items = "".join(
        f'<li class="flag {f.level}"><span class="kind">{escape(f.kind.replace("_", " "))}</span>'
        f"{escape(f.message)}</li>"
        for f in flags
    )
    return f'<ul class="flags">{items}</ul>'


def _html_comparison(s: ComparisonSummary) -> str:
    n = f", {s.n_requests:,} paired requests" if s.n_requests else ""
    table = f'<div class="scroll">{_html_verdicts(s)}</div>' if s.verdicts else ""
    return (
        f'<article class="comparison"><h3>{escape(s.title)}'
        f'<span class="tally">{escape(_tally(s) + n)}</span></h3>'
        f'<p class="headline">{escape(_headline(s))}</p>{_html_flags(s.flags)}{table}'
        f'<p class="method">{escape(s.method)}.</p></article>'
    )


def _html_summary(results: Results) -> str:
    summaries = comparison_summaries(results)
    body = "".join(_html_comparison(s) for s in summaries) or "<p>One arm: nothing to compare.</p>"
    if len(summaries) > 1:
        body = f'<div class="grid">{body}</div>'
    return (
        f'<section id="summary" class="summary"><h2>Summary</h2>'
        f"{_html_flags(run_flags(results))}{body}</section>"
    )


def _html_figure(figure: Figure) -> str:
    return (
        f'<figure id="fig-{figure.key}">{figure.svg}'
        f"<figcaption>{escape(figure.caption)}</figcaption></figure>"
    )


def _html_cell(parts: list[str]) -> str:
    if len(parts) == 1:
        return f"<td>{escape(parts[0])}</td>"
    spans = "".join(f'<span class="kv">{escape(p)}</span>' for p in parts)
    return f'<td class="kvs">{spans}</td>'


def _html_setting(table: SettingsTable) -> str:
    """One settings section; with a column per arm, a header row naming the arms and the
    rows the arms differ in highlighted."""
    head = ""
    if table.columns != ["Value"]:
        names = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
        head = f"<thead><tr><th>Setting</th>{names}</tr></thead>"
    rows = "".join(
        ('<tr class="differs">' if row.differs else "<tr>")
        + f"<th>{escape(row.key)}</th>"
        + "".join(_html_cell(cell) for cell in row.cells)
        + "</tr>"
        for row in table.rows
    )
    return f"<table>{head}<tbody>{rows}</tbody></table>"


def _html_differing(results: Results) -> str:
    """What the arms ran differently, under the context line; nothing when alike."""
    header, rows = differing_table(results)
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        f'<tr class="differs"><th>{escape(row[0])}</th>'
        + "".join(f'<td class="num">{escape(c)}</td>' for c in row[1:])
        + "</tr>"
        for row in rows
    )
    return (
        '<div class="ran scroll"><table id="arm-engines"><caption>Engine settings that differ'
        f" between arms</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _html_tables(results: Results) -> str:
    """The metrics table on the left, the per-tenant and per-priority ones stacked right."""
    cards = [
        f'<div class="card"><h3>{escape(title)}</h3>'
        f'<div class="scroll">{_html_table(header, rows)}</div></div>'
        for title, header, rows in tables(results)
    ]
    columns = (
        f'<div>{cards[0]}</div><div class="compact">{"".join(cards[1:])}</div>' if cards else ""
    )
    grid = '<div class="grid wide-right">' if len(cards) > 1 else '<div class="grid">'
    return f'<section id="metrics"><h2>Metrics</h2>{grid}{columns}</div></section>'


def render_html(
    results: Results, runs: Sequence[RunResult], tables: Sequence[RequestTable] | None = None
) -> str:
    """The whole report as one self-contained HTML page with inline SVG plots; ``tables``:
    the arms' :class:`RequestTable`, when built already."""
    parts = [
        f'<header><h1>schedkit bench report</h1><p class="context">{escape(context(results))}</p>'
        f"{_html_differing(results)}</header>",
        _html_summary(results),
    ]
    if runs:
        drawn = figures(results, runs, results.slo.ttft_ms, tables)
        plots = "".join(_html_figure(f) for f in drawn)
        parts.append(f'<section id="plots"><h2>Plots</h2><div class="grid">{plots}</div></section>')
    parts.append(_html_tables(results))
    sections = settings(results)
    if sections:
        names = ", ".join(table.title for table in sections)
        cards = "".join(
            f'<div class="scroll"><h3>{escape(table.title)}</h3>{_html_setting(table)}</div>'
            for table in sections
        )
        parts.append(
            f'<section id="settings"><details><summary>Settings: {escape(names)}</summary>'
            f'<div class="grid">{cards}</div></details></section>'
        )
    arms = [arm.policy for arm in results.arms]
    title = "schedkit bench report" + (f": {' vs '.join(arms)}" if arms else "")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def write_report(
    out_dir: Path,
    results: Results,
    runs: Sequence[RunResult],
    tables: Sequence[RequestTable] | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` into ``out_dir``; return their paths.

    ``results`` is the bench's results (what results.json holds); ``runs`` are the arms'
    raw results, in the same order, for the plots (``tables``: theirs, when built).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    md, html = out_dir / "report.md", out_dir / "report.html"
    md.write_text(render_markdown(results), encoding="utf-8")
    html.write_text(render_html(results, runs, tables), encoding="utf-8")
    return md, html
