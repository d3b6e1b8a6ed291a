"""``schedkit bench`` and ``schedkit calibrate``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
import typer.main
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from schedkit.errors import SchedkitError, quote

if TYPE_CHECKING:
    from schedkit.bench.results import ArmMetrics, Results


def bench(
    workload: Annotated[
        str,
        typer.Option(help="Trace name (azure-conv, azure-code, mooncake-conv, ...), spec or file."),
    ],
    out: Annotated[Path, typer.Option(help="Directory for results.json, report.md, report.html.")],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="Policy, composition 'a+b', or config file (its [engine] table sets the"
            " arm's engine settings); repeat per arm."
        ),
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            help="An arm with engine settings of its own, e.g."
            " name=seqs64,policy=fcfs,max_num_seqs=64 (keys: name, policy and the engine"
            " flags below in snake_case); repeat per arm. Simulator only."
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="Engine: sim (the simulator), openai (running servers, --target), or an"
            " adapter's in-process engine: vllm, vllm-twin, sglang."
        ),
    ] = "sim",
    target: Annotated[
        list[str] | None,
        typer.Option(
            help="--engine openai: a server's base URL (http://host:port); one per arm, in"
            " arm order."
        ),
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(help="--engine openai: at most this many requests in flight."),
    ] = None,
    request_timeout_s: Annotated[
        float, typer.Option(help="--engine openai: seconds a request may take in all.")
    ] = 600.0,
    max_seconds: Annotated[
        float | None,
        typer.Option(help="--engine openai: send no request that arrives later than this."),
    ] = None,
    serve_command: Annotated[
        str | None,
        typer.Option(
            help="--engine openai with one --target: start this server command for each arm"
            " ({policy}: the arm's policy), replay once --target answers, then stop it."
        ),
    ] = None,
    server_start_timeout_s: Annotated[
        float, typer.Option(help="--serve-command: seconds a server may take to answer.")
    ] = 600.0,
    model: Annotated[str, typer.Option(help="Model profile.")] = "Llama-3-8B",
    gpu: Annotated[str, typer.Option(help="GPU profile.")] = "H100-SXM",
    tp: Annotated[
        int,
        typer.Option("--tensor-parallel-size", "-tp", "--tp", help="vLLM --tensor-parallel-size."),
    ] = 1,
    replicas: Annotated[
        int,
        typer.Option(
            help="Simulated engines behind a router (route_request; round-robin by default)."
        ),
    ] = 1,
    profile: Annotated[
        str | None,
        typer.Option(help="GPU/model profile file, or a cost profile from `schedkit calibrate`."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Counts the tokens of a request file with prompt text (vllm bench custom"
            " JSONL or ShareGPT, guidellm data): a Hugging Face name or a local directory."
        ),
    ] = None,
    rate_scale: Annotated[
        str,
        typer.Option(help="Multiply the arrival rate; several (0.5,1,2,4) make a load sweep."),
    ] = "1",
    request_rate: Annotated[
        str | None,
        typer.Option(
            help="Offered requests/s instead of --rate-scale (the trace rescaled to it);"
            " several (2,4,8) make a load sweep."
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
    max_requests: Annotated[
        int | None, typer.Option(help="Replay only the first N requests.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for synthetic workloads; traces ignore it.")] = 0,
    slo_ttft_ms: Annotated[
        float | None,
        typer.Option(help="TTFT SLO in ms, for requests without their own (policies see it)."),
    ] = None,
    slo_tpot_ms: Annotated[
        float | None,
        typer.Option(help="TPOT SLO in ms, for requests without their own (policies see it)."),
    ] = None,
    goodput: Annotated[
        bool, typer.Option(help="Search the highest rate meeting SLOs for 90% of requests.")
    ] = False,
    max_num_seqs: Annotated[int, typer.Option(help="vLLM --max-num-seqs.")] = 256,
    max_num_batched_tokens: Annotated[
        int, typer.Option(help="vLLM --max-num-batched-tokens.")
    ] = 8192,
    gpu_memory_utilization: Annotated[
        float, typer.Option(help="vLLM --gpu-memory-utilization.")
    ] = 0.9,
    block_size: Annotated[int, typer.Option(help="vLLM --block-size.")] = 16,
    long_prefill_token_threshold: Annotated[
        int, typer.Option(help="vLLM --long-prefill-token-threshold (0: no cap).")
    ] = 0,
    mixed_prefill: Annotated[
        bool | None,
        typer.Option(
            "--mixed-prefill/--no-mixed-prefill",
            help="The simulator's batches: prefill chunks in decode steps, as vLLM (default),"
            " or prefill-only steps ahead of decode, as SGLang (--no-mixed-prefill).",
        ),
    ] = None,
    no_prefix_caching: Annotated[
        bool,
        typer.Option(
            "--no-enable-prefix-caching",
            "--no-prefix-caching",
            help="vLLM --no-enable-prefix-caching.",
        ),
    ] = False,
    kv_blocks: Annotated[
        int | None,
        typer.Option(
            "--num-gpu-blocks-override",
            "--kv-blocks",
            help="vLLM --num-gpu-blocks-override: the KV capacity in blocks.",
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str,
        typer.Option(
            help="vLLM --kv-cache-dtype: auto (the model's), bfloat16, float16, fp8,"
            " fp8_e4m3, fp8_e5m2; fp8 holds twice the tokens in the same memory."
        ),
    ] = "auto",
    eviction_window: Annotated[
        int | None,
        typer.Option(
            help="Simulator: at most this many LRU blocks offered to an eviction policy"
            " (0 = all; default 4096)."
        ),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(help="Replay only arrivals in START:END seconds of the trace (e.g. 300:600)."),
    ] = None,
    min_effect: Annotated[
        float,
        typer.Option(
            help="Smallest change worth a verdict: relative for latencies and totals,"
            " in points for rates (0.02 = 2%, 2 pp)."
        ),
    ] = 0.02,
    metrics: Annotated[
        str | None,
        typer.Option(help="Comma-separated metrics to give verdicts on (default: all)."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Simulator arms run at once, in forked processes (default: one per core);"
            " a policy's atexit handlers run in them, as with --jobs 1."
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="Exit with status 3 when a policy faulted in any arm.")
    ] = False,
    record_steps: Annotated[
        Path | None,
        typer.Option(
            help="Real engines: write each arm's engine steps to DIR/<arm>.csv, for"
            " schedkit calibrate."
        ),
    ] = None,
) -> None:
    """A/B benchmark: replay one workload through several policies, side by side.

    Exit status: 0 when every arm finished every request; 2 on bad input (nothing runs
    and nothing is written); 3 with --strict when a policy faulted in any arm; else 4 when
    an arm left requests unfinished (its latencies miss them) or, with --engine openai,
    some failed. Results are written for 3 and 4.
    """
    from schedkit.bench.arms import KvCacheDtype, parse_arm
    from schedkit.bench.runner import run_bench
    from schedkit.bench.spec import BenchSpec
    from schedkit.bench.stats.compare import check_metrics, check_min_effect

    check_min_effect(min_effect)
    scales, rates = _rates("--rate-scale", rate_scale), _rates("--request-rate", request_rate)
    if request_rate is not None and rate_scale != "1":
        raise SchedkitError("give --rate-scale or --request-rate, not both")
    verdict_metrics = (
        list(check_metrics([m.strip() for m in metrics.split(",") if m.strip()]))
        if metrics is not None
        else None
    )
    try:
        spec = BenchSpec(
            workload=workload, policies=policy or [], arms=[parse_arm(a) for a in arm or []],
            engine=engine, model=model, gpu=gpu, tp=tp, replicas=replicas,
            profile=profile, rate_scale=scales[0] if len(scales) == 1 else 1.0, max_requests=max_requests, seed=seed, tokenizer=tokenizer,
            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, goodput=goodput,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
            long_prefill_token_threshold=long_prefill_token_threshold, prefix_caching=not no_prefix_caching, kv_blocks=kv_blocks, mixed_prefill=mixed_prefill,
            eviction_window=eviction_window, window=_window(window),
            min_effect=min_effect, verdict_metrics=verdict_metrics, jobs=jobs,
            record_steps=None if record_steps is None else str(record_steps),
            kv_cache_dtype=cast(KvCacheDtype, kv_cache_dtype), targets=target or [],
            max_concurrency=max_concurrency,
            request_timeout_s=request_timeout_s, max_seconds=max_seconds,
            serve_command=serve_command, server_start_timeout_s=server_start_timeout_s,
        )  # fmt: skip
    except ValidationError as exc:
        fields = "; ".join(
            f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors()
        )
        raise SchedkitError(f"bad bench arguments: {fields}") from exc
    if len(rates) == 1 and replicates == 1:  # one bench at an absolute rate
        from schedkit.bench.runner import Bench, arrival_rate

        spec = spec.model_copy(
            update={"rate_scale": rates[0] / arrival_rate(Bench(spec).base.requests)}
        )
        rates = []
    if ray is not None and not (len(scales) > 1 or len(rates) > 0 or replicates > 1):
        raise SchedkitError("--ray runs a sweep's probe points: give several rates or --replicates")
    if len(scales) > 1 or len(rates) > 0 or replicates > 1:
        _sweep(
            spec, out, scales=scales if len(scales) > 1 or not rates else [], rates=rates,
            replicates=replicates, arrivals=arrivals, burstiness=burstiness,
            knee_factor=knee_factor, attainment=attainment, ray=ray,
        )  # fmt: skip
        return
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} arms"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("bench", total=len(spec.policies) + len(spec.arms))

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"running {escape(label)}")

        results = run_bench(spec, out, progress)
    _print_summary(results, out)
    _exit_status(results, console, strict)


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
    if not values or any(not v > 0 for v in values):
        raise SchedkitError(
            f"{flag} {quote(text)} is not a list of positive numbers; write e.g. {flag} 0.5,1,2"
        )
    return values


def _sweep(
    spec: Any, out: Path, *, scales: list[float], rates: list[float], **options: Any
) -> None:
    from rich.progress import TimeRemainingColumn

    from schedkit.bench.sweep.run import run_sweep
    from schedkit.bench.sweep.spec import SweepSpec

    try:
        sweep = SweepSpec(bench=spec, rate_scales=scales, request_rates=rates, **options)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'--' + '-'.join(map(str, e['loc'])).replace('_', '-') + ': ' if e['loc'] else ''}"
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise SchedkitError(f"bad sweep arguments: {problems}") from None
    console = Console(stderr=True)
    with Progress(
        TextColumn("sweep"), BarColumn(), TextColumn("{task.completed}/{task.total} probe points,"),
        TextColumn("{task.fields[arms]} arms done,"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
        transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("sweep", total=None, arms="0/?")

        def progress(done: int, total: int, arms_done: int, arms: int) -> None:
            bar.update(task, completed=done, total=total, arms=f"{arms_done}/{arms}")

        results = run_sweep(sweep, out, progress)
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
    engine = results.engine
    table = Table(title=Text(f"{results.workload.name} on {engine['model']}/{engine['gpu']}"))
    table.add_column("metric")
    for arm in results.arms:
        table.add_column(Text(arm.policy), justify="right")  # a label, not markup
    rows: list[tuple[str, Callable[[ArmMetrics], Any]]] = [
        ("completed", lambda m: m.completed),
        ("rejected", lambda m: m.rejected),
        ("unfinished", lambda m: m.unfinished),
        ("failed", lambda m: m.failed or None),
        ("TTFT p50 ms", lambda m: m.ttft_ms.p50),
        ("TTFT p90 ms", lambda m: m.ttft_ms.p90),
        ("TPOT p50 ms", lambda m: m.tpot_ms.p50),
        ("TPOT p90 ms", lambda m: m.tpot_ms.p90),
        ("queue p90 ms", lambda m: m.queue_ms.p90),
        ("throughput tok/s", lambda m: m.throughput_tok_s),
        ("preemptions", lambda m: m.preemptions),
        ("prefix hit rate", lambda m: m.prefix_hit_rate),
        ("SLO attainment", lambda m: m.slo_attainment),
        ("goodput req/s", lambda m: m.goodput_rps),
        ("policy errors", lambda m: m.policy_errors),
    ]
    for label, get in rows:
        values = [get(arm.metrics) for arm in results.arms]
        if all(v is None for v in values):
            continue
        table.add_row(label, *[_fmt(v) for v in values])
    console = Console()
    console.print(table)
    for flag in results.flags:
        console.print(f"[bold red]! {escape(flag.message)}[/]", highlight=False)
    styles = {"worse": "red", "better": "green", "inconclusive": "yellow", "same": "dim"}
    order = {"worse": 0, "better": 1, "inconclusive": 2, "same": 3}
    for comparison in results.comparisons:
        console.print(f"[bold]{escape(comparison.summary)}[/]", highlight=False)
        for flag in comparison.flags:
            console.print(f"  [bold red]! {escape(flag.message)}[/]", highlight=False)
        for row in sorted(comparison.metrics, key=lambda r: order[r.tone]):
            console.print(f"  [{styles[row.tone]}]{escape(row.verdict)}[/]", highlight=False)
    written = ", ".join(str(out / name) for name in ("results.json", "report.md", "report.html"))
    console.print(Text(f"wrote {written}"), soft_wrap=True)


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
    app.command("bench")(bench)
    app.command("calibrate")(calibrate)
    from schedkit.cli.plan import plan

    app.command("plan")(plan)
