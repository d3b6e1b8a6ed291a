"""``schedkit plan``: the cheapest deployment meeting the SLOs, and its search's table."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from schedkit.errors import SchedkitError, quote

__all__ = ["plan", "render_plan_html", "render_plan_markdown"]


def _list(flag: str, text: str, kind: type) -> list[Any]:
    try:
        values = [kind(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise SchedkitError(f"{flag} {quote(text)} is not a comma-separated list, e.g. {flag} 1,2")
    return values


def _prices(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise SchedkitError(
                f"--price {quote(item)} is not GPU=DOLLARS_PER_HOUR, e.g. --price H100-SXM=3.5"
            ) from None
        if not sep:
            raise SchedkitError(f"--price {quote(item)} is not GPU=DOLLARS_PER_HOUR")
    return out


def plan(
    workload: Annotated[str, typer.Option(help="Trace name, spec or file.")],
    out: Annotated[Path, typer.Option(help="Directory for plan.json, plan.md, plan.html.")],
    gpu: Annotated[str, typer.Option(help="Candidate GPUs, comma-separated.")] = "H100-SXM",
    tp: Annotated[str, typer.Option(help="Candidate tensor-parallel degrees, e.g. 1,2.")] = "1",
    setting: Annotated[
        list[str] | None,
        typer.Option(help="A candidate set of engine settings, e.g. max_num_seqs=128; repeat."),
    ] = None,
    policy: Annotated[str, typer.Option(help="Policy (the router too, with replicas).")] = "fcfs",
    model: Annotated[
        str,
        typer.Option(
            help="Model profile, or a local Hugging Face model folder or its config.json."
        ),
    ] = "Llama-3-8B",
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT SLO in ms.")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO in ms.")] = None,
    target: Annotated[
        float, typer.Option(help="Share of requests that must meet every SLO.")
    ] = 0.9,
    max_replicas: Annotated[int, typer.Option(help="Largest replica count tried.")] = 64,
    price: Annotated[
        list[str] | None, typer.Option(help="GPU=$ per GPU-hour, e.g. H100-SXM=3.5; repeat.")
    ] = None,
    rate_scale: Annotated[float, typer.Option(help="Multiply the arrival rate.")] = 1.0,
    max_requests: Annotated[int | None, typer.Option(help="Plan on the first N requests.")] = None,
    jobs: Annotated[int | None, typer.Option(help="Candidates searched at once.")] = None,
) -> None:
    """Capacity plan: for each GPU x TP x engine-settings candidate, the fewest replicas
    meeting the SLOs for --target of requests, and the cheapest of them."""
    from schedkit.bench.arms import parse_arm
    from schedkit.bench.plan import PlanSpec, run_plan
    from schedkit.bench.spec import BenchSpec

    variants = [parse_arm(s).engine for s in setting or []]
    if any(v.gpu or v.tp or v.replicas for v in variants):
        raise SchedkitError("--setting sets engine settings; give GPUs and TP with --gpu, --tp")
    try:
        spec = PlanSpec(
            bench=BenchSpec(
                workload=workload, policies=[policy], model=model, slo_ttft_ms=slo_ttft_ms,
                slo_tpot_ms=slo_tpot_ms, rate_scale=rate_scale, max_requests=max_requests,
                jobs=jobs,
            ),
            gpus=_list("--gpu", gpu, str), tps=_list("--tp", tp, int),
            **({"settings": variants} if variants else {}),
            max_replicas=max_replicas, target=target, prices=_prices(price or []),
        )  # fmt: skip
    except ValidationError as exc:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise SchedkitError(f"bad plan arguments: {problems}") from None
    with Console(stderr=True).status("searching the candidates"):
        result = run_plan(spec)
    result["workload"] = workload
    result["model"] = model
    result["slo"] = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms}
    _write(out, result)
    if result["best"] is None:
        raise typer.Exit(4)


def _write(out: Path, result: dict[str, Any]) -> None:
    """plan.json, plan.md and plan.html in ``out``, and the headline on the terminal."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "plan.md").write_text(render_plan_markdown(result), encoding="utf-8")
    (out / "plan.html").write_text(render_plan_html(result), encoding="utf-8")
    console = Console()
    console.print(Text(_headline(result)), soft_wrap=True)
    written = ", ".join(str(out / n) for n in ("plan.json", "plan.md", "plan.html"))
    console.print(Text(f"wrote {written}"), soft_wrap=True)


def _name(c: dict[str, Any]) -> str:
    extra = ",".join(f"{k}={v}" for k, v in c["settings"].items())
    return f"{c['gpu']} tp={c['tp']}" + (f" [{extra}]" if extra else "")


def _headline(result: dict[str, Any]) -> str:
    best = result["best"]
    if best is None:
        return f"no candidate meets the SLOs for {result['target']:.0%} of requests"
    cost = f", ${best['cost_per_hour']:,.2f}/h" if best["cost_per_hour"] is not None else ""
    return (
        f"cheapest ({result['ranked_by']}): {_name(best)} x {best['replicas']} replicas ="
        f" {best['gpus']} GPUs{cost}, meeting the SLOs for {result['target']:.0%} of requests"
    )


def _slo(result: dict[str, Any]) -> str:
    slo = result["slo"]
    parts = [
        f"{k} {slo[f'{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if slo[f"{k.lower()}_ms"]
    ]
    return "SLOs: " + ", ".join(parts)


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in result["candidates"]:
        for p in c["probes"]:
            mark = "chosen" if c.get("replicas") == p["replicas"] else ""
            rows.append([
                _name(c), str(p["replicas"]), str(p["gpus"]), f"{p['slo_attainment']:.1%}",
                "-" if p["ttft_p90_ms"] is None else f"{p['ttft_p90_ms']:,.0f}",
                "-" if p["tpot_p90_ms"] is None else f"{p['tpot_p90_ms']:,.1f}", mark,
            ])  # fmt: skip
        if "error" in c:
            rows.append([_name(c), "-", "-", "-", "-", "-", c["error"]])
    return rows


HEADER = ["candidate", "replicas", "GPUs", "SLO attainment", "p90 TTFT ms", "p90 TPOT ms", ""]


def _thumb(result: dict[str, Any]) -> list[str]:
    lines = []
    for c in result["candidates"]:
        t = c.get("rule_of_thumb")
        if t:
            lines.append(
                f"- {_name(c)}: {t['concurrency_per_gpu']:,.0f} concurrent requests per GPU"
                f" ({t['tokens_per_request']:,.0f} tokens each); Little's law needs"
                f" {t['concurrency_needed']:,.1f} at the chosen size, so"
                f" {t['replicas']} replica(s) by the rule vs {c['replicas']} by the search"
            )
    return lines


def render_plan_markdown(result: dict[str, Any]) -> str:
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(row) + " |" for row in _rows(result)]
    return "\n".join([
        "# schedkit plan", "", _headline(result) + ".", "",
        f"{result['workload']} on {result['model']}; {_slo(result)}; ranked by"
        f" {result['ranked_by']}. Every probe of the search:", "", *table, "",
        "Rule of thumb (per-GPU concurrency = (memory - weights - reserve) / (KV bytes per"
        " token x tokens per request); docs/planning.md):", "", *_thumb(result), "",
    ])  # fmt: skip


def render_plan_html(result: dict[str, Any]) -> str:
    from schedkit.bench.report.render import _CSS
    from schedkit.bench.report.svg import line_chart

    series = [
        (_name(c), [(p["gpus"], p["slo_attainment"]) for p in c["probes"]])
        for c in result["candidates"]
        if c["probes"]
    ]
    chart = line_chart(
        series, title="SLO attainment vs GPUs", x_label="GPUs (replicas x TP)",
        y_label="SLO attainment", y_min=0.0, y_max=1.0,
    )  # fmt: skip
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
        for row in _rows(result)
    )
    thumb = "".join(f"<li>{escape(line[2:])}</li>" for line in _thumb(result))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>schedkit plan'
        f"</title><style>{_CSS}</style></head><body><h1>schedkit plan</h1>"
        f'<p class="headline">{escape(_headline(result))}</p><figure>{chart}<figcaption>'
        f"Every probe; the target is {result['target']:.0%}.</figcaption></figure>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<h2>Rule of thumb</h2><ul>{thumb}</ul></body></html>\n"
    )
