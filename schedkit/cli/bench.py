"""``schedkit bench`` and ``schedkit calibrate``."""

from __future__ import annotations

import difflib
import inspect
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from schedkit.cli.spec_options import Option, SpecOptions
from schedkit.errors import SchedkitError, quote

if TYPE_CHECKING:
    from schedkit.bench.results import ArmMetrics, Results, Summary
    from schedkit.bench.spec import BenchSpec


def _run_options(
    out: Annotated[Path, typer.Option(help="Directory for results.json, report.md, report.html.")],
    rate_scale: Annotated[
        str,
        typer.Option(help="Multiply the arrival rate; several (0.5,1,2,4) make a load sweep."),
    ] = "1",
    request_rate: Annotated[
        str | None,
        typer.Option(
            help="Offered requests/s instead of --rate-scale (the trace rescaled to it);"
            " several (2,4,8) make a load sweep; inf sends every request at once (vllm"
            " bench serve's default)."
        ),
    ] = None,
    replicates: Annotated[
        int,
        typer.Option(
            help="Sweep: independent request streams per rate (trace windows, or seeds"
            " with --arrivals poisson); 3 or more give intervals."
        ),
    ] = 1,
    arrivals: Annotated[
        str,
        typer.Option(
            help="Sweep: 'trace' (its timestamps, rescaled) or 'poisson' (its lengths on"
            " seeded gamma arrivals, as vLLM bench)."
        ),
    ] = "trace",
    burstiness: Annotated[
        float, typer.Option(help="Sweep, poisson arrivals: gamma shape (1: Poisson).")
    ] = 1.0,
    knee_factor: Annotated[
        float,
        typer.Option(help="Sweep: the knee is where p90 TTFT exceeds this x its low-load value."),
    ] = 2.0,
    attainment: Annotated[
        float, typer.Option(help="Sweep: the SLO attainment goodput is measured at.")
    ] = 0.9,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Sweep: run the probe points on Ray: 'local' (a Ray instance on this"
            " machine), 'auto' (the cluster it belongs to) or the head's address."
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="Exit with status 3 when a policy faulted in any arm.")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace the results of an earlier run in --out (a bench's, sweep's or"
            " plan's); without it such a folder is refused."
        ),
    ] = False,
) -> None:
    """The options of a bench run that are not settings of the bench itself (the
    BenchSpec's are derived from it): where to write (and whether over another run's
    results), the rates (several make a load sweep, with its own settings) and the exit
    rule."""


def _spec_options() -> SpecOptions:
    """``schedkit bench``'s options for every BenchSpec field, as the spec defines them;
    what the command line spells otherwise is listed here."""
    from schedkit.bench.arms import parse_arm
    from schedkit.bench.spec import GROUPS, BenchSpec
    from schedkit.bench.stats.compare import check_metrics, check_min_effect

    def metrics(text: str | None) -> list[str] | None:
        if text is None:
            return None
        return list(check_metrics([m.strip() for m in text.split(",") if m.strip()]))

    repeated = list[str] | None
    options = {
        "workload.name": Option(("--workload",), param="workload"),
        "workload.window": Option(cli_type=str | None, convert=_window),
        "policies": Option(("--policy",), "policy", repeated, None, lambda v: v or []),
        "arms": Option(("--arm",), "arm", repeated, None, lambda v: [parse_arm(a) for a in v or []]),
        "live.targets": Option(("--target",), "target", repeated, None, lambda v: v or []),
        "settings.tp": Option(("--tensor-parallel-size", "-tp", "--tp")),
        "settings.kv_blocks": Option(("--num-gpu-blocks-override", "--kv-blocks")),
        "settings.prefix_caching": Option(
            ("--no-enable-prefix-caching", "--no-prefix-caching"),
            "no_prefix_caching", bool, False, lambda v: not v,
        ),
        "settings.mixed_prefill": Option(("--mixed-prefill/--no-mixed-prefill",)),
        "settings.async_scheduling": Option(("--async-scheduling/--no-async-scheduling",)),
        "stats.min_effect": Option(convert=check_min_effect),
        "stats.verdict_metrics": Option(("--metrics",), "metrics", str | None, None, metrics),
        "record_steps": Option(cli_type=Path | None, convert=lambda v: v and str(v)),
        "workload.max_requests": Option(("--num-prompts", "--max-requests")),
        "stats.goodput": Option(
            ("--goodput",), "goodput", str | None, None, lambda v: v == GOODPUT_SEARCH
        ),
        "stats.percentile_metrics": Option(cli_type=str, default="ttft,tpot,itl",
                                           convert=_percentile_metrics),
        "stats.metric_percentiles": Option(cli_type=str, default="99", convert=_percentiles),
    }  # fmt: skip
    # --rate-scale is the run's: several make a sweep (its rate becomes the spec's);
    # --request-rate inf sends every request at once
    skip = frozenset({"workload.rate_scale", "workload.all_at_once"})
    return SpecOptions(BenchSpec, GROUPS, options, skip=skip)


GOODPUT_SEARCH = "search"  # a bare --goodput: search the highest rate meeting the SLOs
_GOODPUT_KEYS = {"ttft": "slo_ttft_ms", "tpot": "slo_tpot_ms"}


def vllm_spellings(args: list[str]) -> list[str]:
    """``bench``'s arguments with vllm bench serve's ways of writing them made typer's:
    ``--goodput ttft:500 tpot:50`` (several values) as ``--goodput ttft:500,tpot:50``,
    and a bare ``--goodput`` (the rate search) as ``--goodput search``. Nothing after
    ``--`` is touched."""
    end = args.index("--") if "--" in args else len(args)
    out: list[str] = []
    i = 0
    while i < end:
        arg = args[i]
        i += 1
        if arg == "--no-goodput":
            continue  # the search's default
        if arg != "--goodput":
            out.append(arg)
            continue
        pairs = []
        while i < end and re.fullmatch(r"[A-Za-z0-9_]+:.*", args[i]):
            pairs.append(args[i])
            i += 1
        out += ["--goodput", ",".join(pairs) or GOODPUT_SEARCH]
    return out + args[end:]


def goodput_slos(text: str | None, given: dict[str, Any]) -> None:
    """``--goodput ttft:MS,tpot:MS`` as the SLOs it sets (``given``'s ``slo_ttft_ms``,
    ``slo_tpot_ms``); a clear error for another key, a value that is no positive number,
    or a target that --slo-*-ms sets otherwise."""
    if text is None or text == GOODPUT_SEARCH:
        return
    for pair in text.split(","):
        key, _, value = pair.partition(":")
        if key not in _GOODPUT_KEYS:
            hint = (
                "; e2el (end-to-end) is not an SLO schedkit's policies see" if key == "e2el" else ""
            )
            raise SchedkitError(
                f"--goodput {quote(pair)}: the keys are ttft and tpot (milliseconds, as vllm"
                f" bench serve), e.g. --goodput ttft:500 tpot:50{hint}"
            )
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not 0 < ms < math.inf:
            raise SchedkitError(
                f"--goodput {quote(pair)}: {quote(value)} is not a positive number of"
                f" milliseconds; write e.g. --goodput {key}:500"
            )
        field = _GOODPUT_KEYS[key]
        if given[field] is not None and given[field] != ms:
            flag = "--" + field.replace("_", "-")
            raise SchedkitError(
                f"--goodput {pair} and {flag} {given[field]:g} set the same target; give one"
            )
        given[field] = ms


def _percentile_metrics(text: str) -> list[str]:
    from schedkit.bench.stats.metrics import VLLM_LATENCIES

    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in VLLM_LATENCIES:
            close = difflib.get_close_matches(name, VLLM_LATENCIES, n=1)
            raise SchedkitError(
                f"--percentile-metrics {quote(text)}: {quote(name)} is not a metric; the"
                f" metrics are vllm bench serve's: {', '.join(VLLM_LATENCIES)}"
                + (f" (did you mean {close[0]}?)" if close else "")
            )
    if not names:
        raise SchedkitError("--percentile-metrics is empty; give e.g. ttft,tpot,itl")
    return names


def _percentiles(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v < 100 for v in values):
        raise SchedkitError(
            f"--metric-percentiles {quote(text)}: give percentiles above 0 and below 100,"
            " comma-separated, e.g. 50,90,99 or 99.9"
        )
    return values


def bench(**given: Any) -> None:
    """A/B benchmark: replay one workload through several policies, side by side.

    Exit status: 0 when every arm finished every request; 2 on bad input (nothing runs
    and nothing is written); 3 with --strict when a policy faulted in any arm; else 4 when
    an arm left requests unfinished (its latencies miss them) or, with --engine openai,
    some failed. Results are written for 3 and 4. Ctrl-C exits 130, writing nothing (a
    sweep keeps its finished probe points). Progress goes to stderr.
    """
    run = {name: given.pop(name) for name in inspect.signature(_run_options).parameters}
    scales = _rates("--rate-scale", run["rate_scale"])
    rates = _rates("--request-rate", run["request_rate"])
    if run["request_rate"] is not None and run["rate_scale"] != "1":
        raise SchedkitError("give --rate-scale or --request-rate, not both")
    goodput_slos(given["goodput"], given)  # vLLM's --goodput ttft:MS tpot:MS: the SLOs
    at_once = math.inf in rates
    if at_once and (len(rates) > 1 or run["replicates"] > 1):
        raise SchedkitError(
            "--request-rate inf sends every request at once, which is no point of a load"
            " sweep; give finite rates (e.g. --request-rate 2,4,8) or inf alone"
        )
    spec = _spec(given, rate_scale=scales[0] if len(scales) == 1 else 1.0)
    if at_once:  # all at 0 s: the engine's throughput; with --max-concurrency a closed loop
        spec, rates = spec.replace(all_at_once=True), []
    sweep = len(scales) > 1 or len(rates) > 0 or run["replicates"] > 1
    if len(rates) == 1 and run["replicates"] == 1:  # one bench at an absolute rate
        from schedkit.bench.runner import Bench, arrival_rate

        spec = spec.replace(rate_scale=rates[0] / arrival_rate(Bench(spec).base.requests))
        rates, sweep = [], False
    if run["ray"] is not None and not sweep:
        raise SchedkitError("--ray runs a sweep's probe points: give several rates or --replicates")
    out: Path = run["out"]
    if sweep:
        options = {k: run[k] for k in ("replicates", "arrivals", "burstiness", "knee_factor")}
        _sweep(
            spec, out, scales=scales if len(scales) > 1 or not rates else [], rates=rates,
            attainment=run["attainment"], ray=run["ray"], overwrite=run["overwrite"], **options,
        )  # fmt: skip
        return
    from schedkit.bench.runner import run_bench

    results = run_bench(spec, out, overwrite=run["overwrite"])  # progress: on stderr
    _print_summary(results, out)
    _exit_status(results, Console(stderr=True), run["strict"])


def _spec(given: dict[str, Any], rate_scale: float) -> BenchSpec:
    """The BenchSpec the command's options give; a clear error naming the flag."""
    from schedkit.bench.spec import BenchSpec

    options = _spec_options()
    data = options.data(given)
    data["workload"]["rate_scale"] = rate_scale
    try:
        return BenchSpec.model_validate(data)
    except ValidationError as exc:
        from schedkit.bench.spec import GROUPS
        from schedkit.validation import problems

        def flag(loc: tuple[int | str, ...]) -> str:  # "": the spec, whose message is its own
            name = _field_name(loc)
            return "" if name is None or name in GROUPS else options.flag(name)

        raise SchedkitError(problems(exc, BenchSpec, flag)) from None


def _field_name(loc: tuple[int | str, ...]) -> str | None:
    """The field an error is about: past its group, if any (a list's index is not one);
    None for the spec as a whole."""
    from schedkit.bench.spec import GROUPS

    names = [part for part in loc if isinstance(part, str)]
    if len(names) > 1 and names[0] in GROUPS:
        return names[1]
    return names[0] if names else None


def _bench_signature() -> inspect.Signature:
    """``bench``'s parameters: the run's options, then every BenchSpec field's."""
    run = inspect.signature(_run_options, eval_str=True).parameters.values()
    out, *rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in run]
    workload, *settings = _spec_options().parameters()
    return inspect.Signature([workload, out, *settings, *rest])


def _exit_status(results: Results, console: Console, strict: bool) -> None:
    """Say which arms left requests unfinished or failed, and exit with the status the
    ``bench`` command's help gives (3 with ``--strict`` on a policy fault, else 4)."""
    unfinished = {a.policy: a.metrics.unfinished for a in results.arms}
    if any(unfinished.values()):
        counts = ", ".join(f"{arm}: {n:,}" for arm, n in unfinished.items() if n)
        console.print(
            Text(
                f"! requests unfinished when the run ended ({counts}); their latencies are"
                " missing from every metric, so the arms are not comparable. Check the"
                f" engine's log; exit status {UNFINISHED_EXIT}"
            ),
            style="bold red",
            soft_wrap=True,
        )
    failed = {a.policy: a.metrics.failed for a in results.arms}
    if any(failed.values()):
        counts = ", ".join(f"{arm}: {n:,}" for arm, n in failed.items() if n)
        console.print(
            Text(
                f"! requests failed ({counts}): metrics.errors in results.json says why;"
                f" each counts as a miss. Exit status {UNFINISHED_EXIT}"
            ),
            style="bold red",
            soft_wrap=True,
        )
    if strict and any(f.kind == "policy_errors" for f in results.flags):
        raise typer.Exit(STRICT_EXIT)
    if any(unfinished.values()) or any(failed.values()):
        raise typer.Exit(UNFINISHED_EXIT)


def _rates(flag: str, text: str | None) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    finite = flag != "--request-rate"  # vLLM's inf: every request at once
    if not values or any(not v > 0 or (finite and v == math.inf) for v in values):
        also = "" if finite else " (or inf: every request at once)"
        raise SchedkitError(
            f"{flag} {quote(text)} is not a list of positive numbers; write e.g. {flag}"
            f" 0.5,1,2{also}"
        )
    return values


def _sweep(
    spec: Any,
    out: Path,
    *,
    scales: list[float],
    rates: list[float],
    overwrite: bool,
    **options: Any,
) -> None:
    from schedkit.bench.sweep.run import run_sweep
    from schedkit.bench.sweep.spec import SweepSpec

    try:
        sweep = SweepSpec(bench=spec, rate_scales=scales, request_rates=rates, **options)
    except ValidationError as exc:
        from schedkit.validation import problems

        def flag(loc: tuple[int | str, ...]) -> str:  # "": the sweep, whose message is its own
            names = [str(part) for part in loc if isinstance(part, str)]
            return "--" + names[0].replace("_", "-") if names else ""

        raise SchedkitError(problems(exc, SweepSpec, flag)) from None
    results = run_sweep(sweep, out, overwrite=overwrite)  # progress: on stderr
    table = Table(title=Text(f"sweep: {results['workload']['name']}"))
    for column in ("arm", "knee", "goodput"):
        table.add_column(column)
    from schedkit.bench.sweep.report import _goodput, _knee

    for a in results["arms"]:
        table.add_row(Text(a["arm"]), _knee(a, a["offered_rps"]), _goodput(a) or "-")
    Console().print(table)
    Console().print(Text(f"knee: {results['rule']['knee']}"), soft_wrap=True)
    written = ", ".join(str(out / n) for n in ("sweep.json", "sweep.md", "sweep.html"))
    Console().print(Text(f"wrote {written}"), soft_wrap=True)


STRICT_EXIT = 3  # --strict: a policy faulted
UNFINISHED_EXIT = 4  # an arm left requests unfinished


def _window(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return float(start), float(end)
    except ValueError:
        raise SchedkitError(
            f"--window {quote(text)} is not START:END; pass two numbers of seconds, e.g. 300:600"
        ) from None


def _print_summary(results: Results, out: Path) -> None:
    from schedkit.bench.report.engines import engine_context
    from schedkit.bench.report.tables import differing_table, load_context
    from schedkit.bench.results import BETTER, INCONCLUSIVE, NO_DIFFERENCE, TONES, WORSE

    console = Console()
    header, differing = differing_table(results)  # what the arms ran differently
    if differing:
        ran = Table(title=Text("engine settings that differ between arms"))
        for i, name in enumerate(header):
            ran.add_column(Text(name), justify="right" if i else "left")
        for cells in differing:
            ran.add_row(*(Text(c) for c in cells), style="bold yellow")
        console.print(ran)
    title = f"{results.workload.name}: {load_context(results)} · {engine_context(results)}"
    table = Table(title=Text(title))
    table.add_column("metric")
    for arm in results.arms:
        table.add_column(Text(arm.policy), justify="right")  # a label, not markup
    for label, get in _summary_rows(results):
        values = [get(arm.metrics) for arm in results.arms]
        if all(v is None for v in values):
            continue
        table.add_row(label, *[_fmt(v) for v in values])
    console.print(table)
    for flag in results.flags:
        console.print(f"[bold red]! {escape(flag.message)}[/]", highlight=False)
    styles = {WORSE: "red", BETTER: "green", INCONCLUSIVE: "yellow", NO_DIFFERENCE: "dim"}
    for comparison in results.comparisons:
        console.print(f"[bold]{escape(comparison.summary)}[/]", highlight=False)
        for flag in comparison.flags:
            console.print(f"  [bold red]! {escape(flag.message)}[/]", highlight=False)
        for row in sorted(comparison.metrics, key=lambda r: TONES.index(r.tone)):
            console.print(f"  [{styles[row.tone]}]{escape(row.verdict)}[/]", highlight=False)
    written = ", ".join(str(out / name) for name in ("results.json", "report.md", "report.html"))
    console.print(Text(f"wrote {written}"), soft_wrap=True)


_VLLM_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def _latency(key: str, q: float | None) -> Callable[[ArmMetrics], float | None]:
    """Reads an arm's latency ``key`` (``ttft_ms``): its mean, or its ``q``-th percentile."""

    def read(metrics: ArmMetrics) -> float | None:
        summary: Summary = getattr(metrics, key)
        return summary.mean if q is None else summary.at(q)

    return read


def _summary_rows(results: Results) -> list[tuple[str, Callable[[ArmMetrics], Any]]]:
    """The summary's rows, in vllm bench serve's words and order: counts, duration and
    throughputs, then mean, median and each ``--metric-percentiles`` of each of the
    ``--percentile-metrics``, then what vLLM does not print."""
    from schedkit.bench.results import percentile_key
    from schedkit.bench.stats.metrics import VLLM_LATENCIES

    stats = results.provenance.spec.get("stats", {})
    names = stats.get("percentile_metrics", ["ttft", "tpot", "itl"])
    percentiles = stats.get("metric_percentiles", [99.0])
    rows: list[tuple[str, Callable[[ArmMetrics], Any]]] = [
        ("completed", lambda m: m.completed),
        ("rejected", lambda m: m.rejected),
        ("unfinished", lambda m: m.unfinished),
        ("failed", lambda m: m.failed or None),
        ("duration (s)", lambda m: m.duration_s),
        ("request throughput (req/s)", lambda m: m.request_throughput_rps),
        ("output token throughput (tok/s)", lambda m: m.throughput_tok_s),
        ("total token throughput (tok/s)", lambda m: m.total_token_throughput_tok_s),
        ("request goodput (req/s)", lambda m: m.request_goodput_rps),
    ]
    for name in names:
        key, label = VLLM_LATENCIES[name], _VLLM_LABELS[name]
        rows.append((f"mean {label} (ms)", _latency(key, None)))
        rows.append((f"median {label} (ms)", _latency(key, 50.0)))
        rows += [
            (f"{percentile_key(q).upper()} {label} (ms)", _latency(key, q)) for q in percentiles
        ]
    return [
        *rows,
        ("queue p90 (ms)", lambda m: m.queue_ms.p90),
        ("preemptions", lambda m: m.preemptions),
        ("prefix hit rate", lambda m: m.prefix_hit_rate),
        ("SLO attainment", lambda m: m.slo_attainment),
        ("max goodput (req/s)", lambda m: m.goodput_rps),
        ("policy errors", lambda m: m.policy_errors),
    ]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def calibrate(
    steps: Annotated[
        Path,
        typer.Argument(
            help="Steps CSV (--record-steps writes one): prefill_tokens,decode_tokens,"
            "kv_tokens,seconds at least."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Where to write the cost profile (JSON).")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Model the roofline reference is for (default: the file's, else Llama-3-8B)."
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU of the roofline reference (default: the file's, else H100-SXM)."),
    ] = None,
    tp: Annotated[int | None, typer.Option(help="TP of the roofline reference.")] = None,
) -> None:
    """Fit step-time coefficients (NNLS) on the earlier 70% of measured steps and print
    the error on the later 30%; `bench --profile` accepts the result."""
    from schedkit.sim.cost.calibration import read_steps, reference_names, save_cost_profile
    from schedkit.sim.cost.fit import fit_steps
    from schedkit.sim.cost.model import RooflineCostModel
    from schedkit.sim.cost.profiles import get_gpu, get_model

    rows, meta = read_steps(steps)
    name, gpu_name, notes = reference_names(meta, model, gpu)
    reference = RooflineCostModel(get_model(name), get_gpu(gpu_name), tp or int(meta.get("tp", 1)))
    for note in notes:
        typer.echo(
            f"note: {note}; the roofline reference (the value of a coefficient the steps"
            f" cannot fit) is {name} on {gpu_name}: pass --model/--gpu to choose it",
            err=True,
        )
    fit = fit_steps(rows, reference)
    for warning in fit.warnings:
        typer.echo(f"warning: {warning}", err=True)
    save_cost_profile(fit, out, source=steps.name, recorded_for=meta)
    typer.echo(
        f"fitted {fit.train_steps} steps of {steps.name}, tested on the next {fit.test_steps}:"
    )
    for kind, e in fit.holdout.items():
        typer.echo(
            f"  held-out {kind:<7} {e['n']:>6} steps  MAPE {e['mape']:6.2%}  p90 APE {e['p90_ape']:6.2%}"
        )
    typer.echo(f"  (on the fitted steps: MAPE {fit.train_mape:.2%})")
    typer.echo(f"coefficients: {fit.model.describe()}")
    typer.echo(f"wrote {out}; use it with: schedkit bench --profile {out} ...")


# schedkit's own names of flags vLLM names otherwise: still accepted, with a note
DEPRECATED_FLAGS = {
    "--tp": "--tensor-parallel-size",
    "--no-prefix-caching": "--no-enable-prefix-caching",
    "--kv-blocks": "--num-gpu-blocks-override",
}


def deprecated_flags(args: list[str]) -> list[str]:
    """A note for each of schedkit's old flag names in ``args`` (before any ``--``)."""
    head = args[: args.index("--")] if "--" in args else args
    given = {a.split("=", 1)[0] for a in head}
    return [
        f"{old} is deprecated and will be removed; use vLLM's name, {new}"
        for old, new in DEPRECATED_FLAGS.items()
        if old in given
    ]


def check_repeated(app: typer.Typer, args: list[str]) -> None:
    """Refuse a single-valued ``bench`` option given twice: the parser keeps the last
    silently, so ``--max-num-seqs 128 --max-num-seqs 64`` would run every arm with 64.
    The options are read from the command typer builds for ``bench``."""
    head = args[: args.index("--")] if "--" in args else args
    command = typer.main.get_command(app)
    bench_command = getattr(command, "commands", {}).get("bench")
    for param in getattr(bench_command, "params", ()):
        if getattr(param, "multiple", False):
            continue  # --policy, --arm: one per arm
        names = [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")]
        given = [a for a in head if a.split("=", 1)[0] in names]
        if len(given) > 1:
            raise SchedkitError(
                f"{names[0]} is given {len(given)} times; give it once. Arms that differ in"
                " an engine setting: --arm name=seqs64,max_num_seqs=64 (repeatable, like"
                " --policy)"
            )


def register(app: typer.Typer) -> None:
    bench.__signature__ = _bench_signature()  # type: ignore[attr-defined]
    app.command("bench")(bench)
    app.command("calibrate")(calibrate)
    from schedkit.cli.contract import contract
    from schedkit.cli.plan import plan

    app.command("plan")(plan)
    app.command("contract")(contract)
