"""The plan's reports: plan.md and plan.html, and the headline the command prints.

Both open with the answer (the one chosen deployment), then every candidate in cost
order, each saying why it is not the chosen one, then every probe of the search and the
rule of thumb. plan.html draws SLO attainment against cost (or GPUs, unpriced) with the
attainment target as a line and the chosen deployment ringed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from schedkit.bench.report.render import _CSS
from schedkit.bench.report.svg import MARK_CSS, line_chart

__all__ = [
    "candidate_rows",
    "header",
    "headline",
    "probe_rows",
    "render_plan_html",
    "render_plan_markdown",
]

Result = Mapping[str, Any]
NA = "n/a"
NA_NOTE = (
    f"{NA}: not measured (a candidate that meets no target, or a percentile of no"
    " finished request)."
)


def candidate_name(c: Mapping[str, Any]) -> str:
    """``H100-SXM tp=1``, with the candidate's own engine settings in brackets; a
    disaggregated one's replica: ``H100-SXM 1P tp=2 + 2D tp=1``."""
    extra = ", ".join(f"{k}={v}" for k, v in c["settings"].items())
    if "pool_tps" in c:
        tp_p, tp_d = c["pool_tps"]
        name = f"{c['gpu']} disagg prefill tp={tp_p}, decode tp={tp_d}"
    elif "phase" in c:
        name = f"{c['gpu']} {c['phase']} tp={c['tp']} alone"
    else:
        name = f"{c['gpu']} tp={c['tp']}"
    return name + (f" [{extra}]" if extra else "")


def _priced(result: Result) -> bool:
    return bool(result["ranked_by"] == "cost per hour")


def _at_size(c: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The probe at the candidate's size (the fewest replicas meeting the target)."""
    return next((p for p in c["probes"] if p["replicas"] == c.get("replicas")), None)


def _num(value: float | None, digits: int) -> str:
    return NA if value is None else f"{value:,.{digits}f}"


def _deployment(c: Mapping[str, Any]) -> str:
    replicas = f"{c['replicas']} replica{'s' if c['replicas'] != 1 else ''}"
    pools = c.get("disaggregated")
    if pools:
        replicas = f"{pools['prefill'][0]} prefill + {pools['decode'][0]} decode instances"
    gpus = f"{c['gpus']} GPU{'s' if c['gpus'] != 1 else ''}"
    cost = f", ${c['cost_per_hour']:,.2f}/h" if c["cost_per_hour"] is not None else ""
    return f"{candidate_name(c)} x {replicas} = {gpus}{cost}"


def headline(result: Result) -> str:
    """The answer in one sentence: the chosen deployment, or that none meets the target."""
    best, target = result["best"], result["attainment"]
    if best is None:
        return (
            f"No candidate meets the SLOs for {target:.0%} of requests within"
            f" {result['max_replicas']} replicas (--max-replicas): see each candidate's outcome."
        )
    met = sum(1 for c in result["candidates"] if "replicas" in c)
    probe = _at_size(best)
    reached = f"{probe['slo_attainment']:.1%}" if probe else NA
    return (
        f"Chosen: {_deployment(best)}. It meets every SLO for {reached} of requests (target"
        f" {target:.0%}), the cheapest by {result['ranked_by']} of the {met} candidate"
        f"{'s' if met != 1 else ''} that reach the target."
    )


def context(result: Result) -> str:
    """What was planned for: the load, the model, the policy, the SLOs and the ranking."""
    slo = result["slo"]
    slos = ", ".join(
        f"{k} {slo[f'{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if slo[f"{k.lower()}_ms"]
    )
    rate = result.get("offered_rps")
    load = (
        f" at {rate:,.2f} req/s (rate scale {result['rate_scale']:.3g})" if rate is not None else ""
    )
    ranked = result["ranked_by"] + ("" if _priced(result) else " (no --price given)")
    policy = f", policy {result['policy']}" if result.get("policy") else ""
    return (
        f"{result['workload']}{load}; {result['model']}{policy}. SLOs: {slos}; target:"
        f" {result['attainment']:.0%} of requests meet every SLO (--attainment). Ranked by"
        f" {ranked}."
    )


def header(result: Result, last: str, per_gpu: bool = False) -> list[str]:
    cost = ["$/h"] if _priced(result) else []
    rate = ["req/s per GPU"] if per_gpu else []
    return ["candidate", "replicas", "GPUs", *cost, "SLO attainment", "p90 TTFT (ms)",
            "p90 TPOT (ms)", *rate, last]  # fmt: skip


def _percent(share: float) -> str:
    """``share`` as a percentage with the digits it has (0.9: 90%, 0.875: 87.5%)."""
    return f"{share * 100:g}%"


def _attained(result: Result, p: Mapping[str, Any]) -> str:
    """A probe's SLO attainment; one stopped early is below the target, by how much
    not measured."""
    if p.get("stopped_early"):
        return f"< {_percent(result['attainment'])}"
    return f"{p['slo_attainment']:.1%}"


def _cells(result: Result, p: Mapping[str, Any] | None) -> list[str]:
    """A probe's figures, as the header's columns after the candidate's name."""
    if p is None:
        return [NA] * (6 if _priced(result) else 5)
    cost = [_num(p["cost_per_hour"], 2)] if _priced(result) else []
    size = str(p["replicas"])
    if "prefill_replicas" in p:
        size = f"{p['prefill_replicas']}P+{p['decode_replicas']}D"
    return [size, str(p["gpus"]), *cost, _attained(result, p),
            _num(p["ttft_p90_ms"], 0), _num(p["tpot_p90_ms"], 1)]  # fmt: skip


def _verdict(result: Result, p: Mapping[str, Any]) -> str:
    """``meets`` or ``misses``; for a probe stopped early, after how many requests."""
    stopped = p.get("stopped_early")
    if stopped:
        return (
            f"misses (stopped after {stopped['after_requests']:,} of"
            f" {stopped['of_requests']:,} requests)"
        )
    return "meets" if p["meets"] else "misses"


def candidate_rows(result: Result) -> list[list[str]]:
    """One row per candidate, in cost order, at its size, with the rate it serves within
    the SLOs per GPU (DistServe's goodput per GPU) and its outcome."""
    rate = bool(result.get("disagg"))  # the column of plans with disaggregated candidates
    return [
        [
            candidate_name(c),
            *_cells(result, _at_size(c)),
            *([_num(c.get("goodput_per_gpu_rps"), 3)] if rate else []),
            c["outcome"],
        ]
        for c in result["candidates"]
    ]


def probe_rows(result: Result) -> list[list[str]]:
    """Every probe of the search: candidates in cost order, then by replicas."""
    return [
        [candidate_name(c), *_cells(result, p), _verdict(result, p)]
        for c in result["candidates"]
        for p in c["probes"]
    ]


def stopped_note(result: Result) -> str:
    """What a probe stopped early says, when any did ("" when none did)."""
    probes = [p for c in result["candidates"] for p in c["probes"]]
    stopped = sum(1 for p in probes if p.get("stopped_early"))
    if not stopped:
        return ""
    return (
        f"{stopped} of the {len(probes)} probes stopped early, once so many requests had"
        " missed an SLO that they could no longer reach the target: their SLO attainment"
        f" reads < {_percent(result['attainment'])} and their other figures were not"
        f" measured ({NA}). Each candidate's figures at its size are from a complete run;"
        " --no-early-stop runs every probe to its end."
    )


def _unmeasured(result: Result, candidates: list[list[str]]) -> bool:
    """Whether a figure reads n/a other than a stopped probe's (NA_NOTE says why)."""
    complete = [
        [candidate_name(c), *_cells(result, p)]
        for c in result["candidates"]
        for p in c["probes"]
        if not p.get("stopped_early")
    ]
    return any(NA in row for row in candidates + complete)


RANKING = (
    "Each candidate is sized at the fewest replicas meeting the target; its outcome says"
    " why it is not the chosen one (costs compared with the chosen's). Ties in cost go to"
    " fewer GPUs, then to the higher SLO attainment."
)
THUMB = (
    "Per-GPU concurrency = (memory - weights - reserve) / (KV bytes per token x tokens per"
    " request), and replicas by Little's law (docs/planning.md); per candidate:"
)


def _thumb(result: Result) -> list[str]:
    lines = []
    for c in result["candidates"]:
        t = c.get("rule_of_thumb")
        if t:
            lines.append(
                f"{candidate_name(c)}: {t['concurrency_per_gpu']:,.0f} concurrent requests per"
                f" GPU ({t['tokens_per_request']:,.0f} tokens each); Little's law needs"
                f" {t['concurrency_needed']:,.1f} at its size, so {t['replicas']} replica(s)"
                f" by the rule vs {c['replicas']} by the search"
            )
    return lines


PHASES_NOTE = (
    "Before the disaggregated candidates, each phase is sized alone, as DistServe's"
    " placement search does: the fewest prefill instances of each TP meeting the TTFT SLO"
    " with decode taking no time, and the fewest decode instances meeting both SLOs with"
    " prefill taking no time. Each prefill TP x decode TP is then searched from those two"
    " sizes up, one instance at a time, with both phases running (its replicas column:"
    " prefill P + decode D instances)."
)


def _phases(result: Result) -> list[str]:
    """plan.md's section on the phases sized alone (none without --disagg)."""
    phases = result.get("phases")
    if not phases:
        return []
    rows = [
        [
            candidate_name(c),
            str(c.get("replicas", NA)),
            str(len(c["probes"])),
            c.get("error", "sized"),
        ]
        for c in phases
    ]
    header = ["phase", "instances", "probes", "outcome"]
    return ["## Disaggregated: each phase sized alone", "", PHASES_NOTE, "",
            *_md_table(header, rows, None), ""]  # fmt: skip


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], bold: int | None) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 2) + "---|"]
    for i, row in enumerate(rows):
        cells = [f"**{c}**" if i == bold else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_plan_markdown(result: Result) -> str:
    chosen = 0 if result["best"] is not None else None
    candidates = candidate_rows(result)
    probes = probe_rows(result)
    na = _unmeasured(result, candidates)
    stopped = stopped_note(result)
    return "\n".join([
        "# schedkit plan", "", headline(result), "", context(result), "",
        "## Candidates, cheapest first", "",
        *_md_table(header(result, "outcome", per_gpu=bool(result.get("disagg"))), candidates,
                   chosen), "", RANKING,
        *([NA_NOTE] if na else []), "",
        *_phases(result),
        "## Every probe of the search", "",
        *_md_table(header(result, "vs target"), probes, None), "",
        *([stopped, ""] if stopped else []),
        "## Rule of thumb", "", THUMB, "", *(f"- {line}" for line in _thumb(result)), "",
    ])  # fmt: skip


def _html_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], chosen: int | None, table_id: str
) -> str:
    number = [0 < i < len(header) - 1 for i in range(len(header))]
    head = "".join(
        f"<th{' class=num' if n else ''}>{escape(h)}</th>"
        for h, n in zip(header, number, strict=True)
    )
    body = "".join(
        f"<tr{' class=chosen' if i == chosen else ''}>"
        + "".join(
            f"<td{' class=num' if n else ''}>{escape(c)}</td>"
            for c, n in zip(row, number, strict=True)
        )
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def plan_chart(result: Result) -> str:
    """SLO attainment against cost ($/h, or GPUs unpriced) for every probe, one line per
    candidate through those run to their end; a probe stopped early as a bar from the
    least to the most its attainment could have been; the target as a dashed line, the
    chosen deployment ringed."""
    priced = _priced(result)

    def x(p: Mapping[str, Any]) -> float:
        return float(p["cost_per_hour"] if priced else p["gpus"])

    probed = [c for c in result["candidates"] if c["probes"]]
    series = [
        (
            candidate_name(c),
            [(x(p), p["slo_attainment"]) for p in c["probes"] if not p.get("stopped_early")],
        )
        for c in probed
    ]
    bars = [  # a probe stopped early: its attainment lies somewhere in the bar
        [
            (x(p), s["slo_attainment_at_least"], s["slo_attainment_at_most"])
            for p in c["probes"]
            if (s := p.get("stopped_early"))
        ]
        for c in probed
    ]
    # a candidate probed once shows as a dot; a bar has one at its top, the most it can be
    dots = [
        [*points, *((at, top) for at, _, top in b)]
        for (_, points), b in zip(series, bars, strict=True)
    ]
    best = result["best"]
    probe = _at_size(best) if best is not None else None
    return line_chart(
        series,
        title=f"SLO attainment vs {'cost' if priced else 'GPUs'}, every probe",
        x_label="$ per hour (replicas x TP x price)" if priced else "GPUs (replicas x TP)",
        y_label="SLO attainment", y_min=0.0, y_max=1.0,
        levels=[(result["attainment"], f"target {result['attainment']:.0%}")],
        marks=[(x(probe), probe["slo_attainment"], "chosen")] if probe else [], dots=dots,
        whiskers=bars,
    )  # fmt: skip


STOPPED_BARS = (
    " A bar is a probe stopped early: its attainment lies somewhere along it, up to the dot"
    " at its top, below the target."
)
PAGE_CSS = (
    MARK_CSS + "tr.chosen td{background:#dafbe1;font-weight:600} #chart figure{max-width:760px}"
    " code{white-space:nowrap;font-size:.9em} #candidates,#probe-table{width:auto}"
    " @media (max-width:900px){table{font-size:.78rem} th,td{padding:.2rem .3rem}"
    " .summary{padding:.75rem .6rem} .num{white-space:normal}}"
)


def prose(text: str) -> str:
    """``text`` as HTML, each command-line flag in it kept on one line."""
    return re.sub(r"(--[a-z][a-z-]*)", r"<code>\1</code>", escape(text))


def render_plan_html(result: Result) -> str:
    candidates = candidate_rows(result)
    probes = probe_rows(result)
    na = _unmeasured(result, candidates)
    stopped = stopped_note(result)
    chosen = 0 if result["best"] is not None else None
    thumb = "".join(f"<li>{prose(line)}</li>" for line in _thumb(result))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>schedkit plan'
        f"</title><style>{_CSS}{PAGE_CSS}</style></head>\n<body>\n<header><h1>schedkit plan"
        f'</h1><p class="context">{prose(context(result))}</p></header>\n'
        f'<section id="answer" class="summary"><h2>The answer</h2>'
        f'<p class="headline">{prose(headline(result))}</p>'
        f"<h3>Candidates, cheapest first</h3>"
        f"{_html_table(header(result, 'outcome', per_gpu=bool(result.get('disagg'))), candidates, chosen, 'candidates')}"
        f'<p class="method">{prose(RANKING + (" " + NA_NOTE if na else ""))}</p></section>\n'
        f'<section id="chart"><h2>SLO attainment of every probe</h2><figure>'
        f"{plan_chart(result)}<figcaption>One line per candidate through the replica counts"
        f" the search tried; the dashed line is the target ({result['attainment']:.0%}),"
        f" the ring the chosen deployment.{STOPPED_BARS if stopped else ''}</figcaption>"
        "</figure></section>\n"
        f'<section id="probes"><h2>Every probe of the search</h2>'
        f"{_html_table(header(result, 'vs target'), probes, None, 'probe-table')}"
        f"{f'<p class=method>{prose(stopped)}</p>' if stopped else ''}</section>\n"
        f'<section id="thumb"><h2>Rule of thumb</h2><p>{prose(THUMB)}</p><ul>{thumb}</ul>'
        "</section>\n</body></html>\n"
    )
