"""``schedkit plan``: the cheapest deployment meeting the SLOs; its reports are
:mod:`schedkit.bench.plan_report`'s."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from schedkit.bench.settings import DEFAULT_KV_LINK, EngineSpec
from schedkit.bench.spec import WorkloadSpec
from schedkit.errors import SchedkitError, quote

if TYPE_CHECKING:
    from schedkit.bench.plan import PlanSpec

__all__ = ["plan"]


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


def _help(model: type[BaseModel], field: str, more: str = "") -> str:
    """The help of a spec's field (said once, in the spec), with what plan adds."""
    return (model.model_fields[field].description or "") + more


def _one_rate(flag: str, text: str) -> float:
    """One positive, finite rate: a plan sizes a deployment for one load."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if len(values) > 1:
        raise SchedkitError(
            f"{flag} {quote(text)}: a plan sizes a deployment for one load, so give one rate;"
            f" several rates make a load sweep (schedkit bench {flag} {text})"
        )
    if not values or not (values[0] > 0 and math.isfinite(values[0])):
        raise SchedkitError(f"{flag} {quote(text)} is not a positive number; write e.g. {flag} 2")
    return values[0]


def _attainment(ctx: typer.Context, attainment: float, target: float | None) -> float:
    """``--attainment``, or ``--target``, its old name on plan (said once: bench's
    ``--target`` is a server's URL)."""
    if target is None:
        return attainment
    if getattr(ctx.get_parameter_source("attainment"), "name", None) != "DEFAULT":
        raise SchedkitError("give --attainment only; --target is its old name on plan")
    Console(stderr=True).print(
        Text.assemble(
            ("warning:", "yellow"),
            " plan --target is deprecated and will be removed; it is the share of requests"
            f" meeting every SLO, which bench and plan call --attainment: --attainment {target:g}"
            " (bench's --target is a server's URL)",
        ),
        highlight=False,
        soft_wrap=True,
    )
    return target


# the options plan shares with bench, by bench's names and meanings
Attainment = Annotated[
    float, typer.Option(help="Share of requests that must meet every SLO (as bench --attainment).")
]
OldTarget = Annotated[float | None, typer.Option(hidden=True, help="Deprecated: --attainment.")]
RateScale = Annotated[
    str, typer.Option(help=_help(WorkloadSpec, "rate_scale", " One rate, as bench's."))
]
RequestRate = Annotated[
    str | None,
    typer.Option(
        help="Offered requests/s instead of --rate-scale (the trace rescaled to it), as bench's."
    ),
]

# how the search runs its probes
Jobs = Annotated[int | None, typer.Option(help="Probes run at once (default: one per CPU core).")]
EarlyStop = Annotated[
    bool,
    typer.Option(
        help="Stop a probe once it can no longer reach --attainment (its other figures then"
        " not measured); --no-early-stop runs every probe to its end."
    ),
]


# disaggregated candidates
Disagg = Annotated[
    bool,
    typer.Option(
        help="Add disaggregated candidates: per GPU, prefill TP x decode TP (each of --tp),"
        " each phase sized alone first; ranked with the aggregated ones."
    ),
]
KvLink = Annotated[str, typer.Option(help=_help(EngineSpec, "kv_link"))]
Prune = Annotated[
    bool,
    typer.Option(
        help="With --disagg, search a disaggregated candidate only as far as it could be"
        " cheaper than the cheapest aggregated one; --no-prune sizes every one."
    ),
]


def plan(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option(help=_help(WorkloadSpec, "name"))],
    out: Annotated[Path, typer.Option(help="Directory for plan.json, plan.md, plan.html.")],
    gpu: Annotated[str, typer.Option(help="Candidate GPUs, comma-separated.")] = "H100-SXM",
    tp: Annotated[str, typer.Option(help="Candidate tensor-parallel degrees, e.g. 1,2.")] = "1",
    setting: Annotated[
        list[str] | None,
        typer.Option(help="A candidate set of engine settings, e.g. max_num_seqs=128; repeat."),
    ] = None,
    policy: Annotated[str, typer.Option(help="Policy (the router too, with replicas).")] = "fcfs",
    model: Annotated[str, typer.Option(help=_help(EngineSpec, "model"))] = "Llama-3-8B",
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT SLO in ms.")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO in ms.")] = None,
    attainment: Attainment = 0.9,
    target: OldTarget = None,
    max_replicas: Annotated[int, typer.Option(help="Largest replica count tried.")] = 64,
    price: Annotated[
        list[str] | None, typer.Option(help="GPU=$ per GPU-hour, e.g. H100-SXM=3.5; repeat.")
    ] = None,
    rate_scale: RateScale = "1",
    request_rate: RequestRate = None,
    max_requests: Annotated[
        int | None, typer.Option(help=_help(WorkloadSpec, "max_requests"))
    ] = None,
    jobs: Jobs = None,
    early_stop: EarlyStop = True,
    disagg: Disagg = False,
    kv_link: KvLink = DEFAULT_KV_LINK,
    prune: Prune = True,
    overwrite: Annotated[bool, typer.Option(help="Replace earlier results in --out.")] = False,
) -> None:
    """Capacity plan: for each GPU x TP x engine-settings candidate, the fewest replicas
    meeting the SLOs for --attainment of requests, and the cheapest of them."""
    if request_rate is not None and rate_scale != "1":
        raise SchedkitError("give --rate-scale or --request-rate, not both")
    spec = _plan_spec(
        dict(
            workload=workload, policies=[policy], model=model, slo_ttft_ms=slo_ttft_ms,
            slo_tpot_ms=slo_tpot_ms, rate_scale=_one_rate("--rate-scale", rate_scale),
            max_requests=max_requests, jobs=jobs, kv_link=kv_link,
        ),
        dict(
            gpus=_list("--gpu", gpu, str), tps=_list("--tp", tp, int), setting=setting,
            max_replicas=max_replicas, attainment=_attainment(ctx, attainment, target),
            prices=_prices(price or []), early_stop=early_stop, disagg=disagg, prune=prune,
            request_rate=None if request_rate is None else _one_rate("--request-rate", request_rate),
        ),
    )  # fmt: skip
    from schedkit.bench.output import check_replacing
    from schedkit.bench.plan import run_plan

    check_replacing(out, overwrite)  # another run's results there: refused, before the search
    result = run_plan(spec)  # its progress on stderr (schedkit.bench.progress)
    _write(out, result)
    if result["best"] is None:
        raise typer.Exit(4)


def _plan_spec(bench: dict[str, Any], plan: dict[str, Any]) -> PlanSpec:
    """The PlanSpec of the command's values; a clear error naming what is wrong."""
    from schedkit.bench.arms import parse_arm
    from schedkit.bench.plan import PlanSpec
    from schedkit.bench.spec import BenchSpec

    variants = [parse_arm(s).engine for s in plan.pop("setting") or []]
    if any(v.gpu or v.tp or v.replicas for v in variants):
        raise SchedkitError("--setting sets engine settings; give GPUs and TP with --gpu, --tp")
    if variants:
        plan["settings"] = variants
    try:
        return PlanSpec.model_validate({"bench": BenchSpec(**bench), **plan})
    except ValidationError as exc:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise SchedkitError(f"bad plan arguments: {problems}") from None


def _write(out: Path, result: dict[str, Any]) -> None:
    """plan.json, plan.md and plan.html in ``out``; the answer and the candidates, in cost
    order, on the terminal."""
    from schedkit.bench.plan_report import (
        candidate_rows,
        header,
        headline,
        render_plan_html,
        render_plan_markdown,
        stopped_note,
    )

    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "plan.md").write_text(render_plan_markdown(result), encoding="utf-8")
    (out / "plan.html").write_text(render_plan_html(result), encoding="utf-8")
    console = Console()
    names = header(result, "outcome", per_gpu=bool(result.get("disagg")))
    keep = [i for i, name in enumerate(names) if not name.startswith("p90")]  # plan.md has them
    table = Table(title=Text("candidates, cheapest first"))
    for i in keep:
        table.add_column(Text(names[i]), justify="right" if 0 < i < len(names) - 1 else "left")
    for n, row in enumerate(candidate_rows(result)):
        chosen = n == 0 and result["best"] is not None
        table.add_row(*(Text(row[i]) for i in keep), style="bold green" if chosen else None)
    console.print(table)
    console.print(Text(headline(result)), soft_wrap=True)
    if stopped := stopped_note(result):
        console.print(Text(stopped), soft_wrap=True)
    written = ", ".join(str(out / n) for n in ("plan.json", "plan.md", "plan.html"))
    console.print(Text(f"wrote {written}"), soft_wrap=True)
