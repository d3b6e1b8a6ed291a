"""The ``schedkit`` command: list policies, run A/B benchmarks, calibrate cost models."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from schedkit.cli.policy_args import config_with_options
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.plugins import PolicyRegistry, implemented_hooks

# rich_markup_mode=None: click's plain help, which wraps text to the terminal, never
# truncates an option's name, and prints brackets in help and errors as written.
app = typer.Typer(
    help="Pluggable scheduling policies for LLM serving engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
err = Console(stderr=True)


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one paragraph the terminal wraps. The message is
    plain text: rich markup in it (a hint such as ``[[gpu]]``) is printed, not applied."""
    err.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"schedkit {version('schedkit')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Pluggable scheduling policies for LLM serving engines."""


def describe_policies(registry: PolicyRegistry) -> list[dict[str, Any]]:
    """Each installed policy: distribution, version, hooks, options schema (or its error)."""
    rows: list[dict[str, Any]] = []
    for entry in registry.entries():
        row: dict[str, Any] = {
            "name": entry.name,
            "distribution": entry.distribution,
            "version": entry.version,
            "target": entry.target,
        }
        try:
            cls = entry.load()
        except SchedkitError as exc:
            row["error"] = str(exc)
        else:
            row["hooks"] = implemented_hooks(cls)
            row["options_schema"] = cls.Options.model_json_schema()
            row["summary"] = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        rows.append(row)
    return rows


#: The width ``schedkit policies`` fits (its ``--wide`` table takes the terminal's).
POLICIES_WIDTH = 80
_NAME_COLUMN = 24  # a longer name is printed whole, its summary cut shorter


@app.command()
def policies(
    wide: Annotated[
        bool, typer.Option("--wide", help="A table of hooks, options and distributions.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON: all of it, summaries included.")
    ] = False,
) -> None:
    """List installed policies, one line each. --wide: hooks, options and distributions;
    --json: all of it."""
    rows = describe_policies(PolicyRegistry.discover())
    for row in rows:
        if "error" in row:
            print_error(row["error"])
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif wide:
        _policies_table(rows)
    else:
        for line in policy_lines(rows):
            typer.echo(line)
        typer.echo("schedkit policies --wide: hooks, options and distributions; --json: all.")


def policy_lines(rows: list[dict[str, Any]], width: int = POLICIES_WIDTH) -> list[str]:
    """One line per policy within ``width`` columns: its name, never cut, then its summary,
    cut with "…" where it would run past."""
    column = min(max((len(row["name"]) for row in rows), default=0), _NAME_COLUMN)
    lines = []
    for row in rows:
        name = row["name"]
        summary = row.get("summary") or ("(import failed)" if "error" in row else "-")
        text = Text(summary.replace("``", ""))
        text.truncate(max(width - max(len(name), column) - 2, 1), overflow="ellipsis")
        lines.append(f"{name:<{column}}  {text.plain}")
    return lines


def _policies_table(rows: list[dict[str, Any]]) -> None:
    # names are never cut; options and distributions wrap
    table = Table(Column("policy", no_wrap=True), Column("hooks", no_wrap=True),
                  Column("options", overflow="fold"), Column("distribution", overflow="fold"))  # fmt: skip
    for row in rows:
        options = ", ".join(row.get("options_schema", {}).get("properties", {})) or "-"
        hooks = "\n".join(row.get("hooks", [])) or ("(import failed)" if "error" in row else "-")
        cells = (row["name"], hooks, options, f"{row['distribution']} {row['version']}")
        table.add_row(*(Text(str(cell)) for cell in cells))  # names are text, not markup
    Console().print(table)


@app.command()
def workloads(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the bundled workloads (bench --workload NAME) with their shape."""
    from schedkit.workload import KNOWN_WORKLOADS, load_workload

    rows = [load_workload(name).summary() for name in KNOWN_WORKLOADS]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(str(row["name"])) for row in rows)  # plain text: nothing is cut off
    typer.echo(
        f"{'workload':<{width}} {'requests':>8} {'req/s':>6} {'prompt p50/p90':>14}"
        f" {'output p50/p90':>14} {'tenants':>7} prefixes"
    )
    for row in rows:
        prompt = f"{row['prompt_p50']}/{row['prompt_p90']}"
        output = f"{row['output_p50']}/{row['output_p90']}"
        tenants = len(row["tenants"]) if isinstance(row["tenants"], list) else 0
        typer.echo(
            f"{row['name']:<{width}} {row['requests']:>8} {row['rate_rps']:>6.2f} {prompt:>14}"
            f" {output:>14} {tenants:>7} {'shared' if row['hash_block_tokens'] else '-'}"
        )
    typer.echo("Sources and licences: --json, and schedkit/data/TRACES-LICENSES.md.")


@app.command()
def export(
    workload: Annotated[str, typer.Argument(help="Workload: a bundled name, spec or file.")],
    out: Annotated[str, typer.Argument(help="The Mooncake-trace JSONL file to write.")],
    max_requests: Annotated[
        int | None, typer.Option(help="Only the first N requests.", min=1)
    ] = None,
    rate_scale: Annotated[float, typer.Option(help="Multiply the arrival rate.")] = 1.0,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Counts the tokens of a request file with prompt text."),
    ] = None,
) -> None:
    """Write a workload as a Mooncake trace, for aiperf to replay (docs/interop.md)."""
    from pathlib import Path

    from schedkit.bench.engines.interop import export_mooncake
    from schedkit.workload import load_workload

    if not rate_scale > 0:
        raise SchedkitError(f"--rate-scale must be > 0, got {rate_scale}")
    loaded = load_workload(workload, max_requests=max_requests, tokenizer=tokenizer)
    if rate_scale != 1.0:
        loaded = loaded.scaled(rate_scale)
    n = export_mooncake(loaded, Path(out))
    typer.echo(f"wrote {n:,} requests of {loaded.name} to {out}")


SERVE_GROUP = "schedkit.serve"  # entry points: engine name -> serve(config, engine_args) -> int


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    engine: Annotated[str, typer.Argument(help="Engine to launch: sim, vllm, sglang or lmdeploy.")],
    policy: Annotated[
        str, typer.Option(help="Policy, composition 'a+b', or config file.")
    ] = "fcfs",
    options: Annotated[
        str | None, typer.Option(help='Options as JSON: {"policy-name": {...}}.')
    ] = None,
    record_steps: Annotated[
        str | None,
        typer.Option(help="Write one CSV row per engine step to FILE, for schedkit calibrate."),
    ] = None,
) -> None:
    """Launch an engine's server with a policy: schedkit serve sim|vllm|sglang|lmdeploy --policy X -- <engine args>."""
    from importlib import metadata

    from schedkit.adapter.recording import RECORDING_ENGINES

    config = config_with_options(policy, options)
    if record_steps is not None:
        config = config.model_copy(update={"record_steps": record_steps})
    if config.record_steps is not None and engine not in RECORDING_ENGINES:
        raise SchedkitError(
            f"record_steps: recording engine steps is wired for {' and '.join(RECORDING_ENGINES)}"
            f" only; {engine} would ignore it. Drop --record-steps (or record_steps in the"
            " config)"
        )
    found = {ep.name: ep for ep in metadata.entry_points(group=SERVE_GROUP)}
    if engine not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise SchedkitError(
            f"no server launcher for engine {engine!r} ({known}); install schedkit-vllm"
            " (adapters/vllm) for vllm, schedkit-sglang (adapters/sglang) for sglang or"
            " schedkit-lmdeploy (adapters/lmdeploy) for lmdeploy"
        )
    PolicyFacade.from_config(config)  # fail here, not inside the engine, on a bad selection
    raise typer.Exit(found[engine].load()(config, list(ctx.args)))


def main() -> None:
    from schedkit.bench.progress import show_progress
    from schedkit.cli import bench as bench_cli  # registers bench, calibrate and plan

    bench_cli.register(app)
    show_progress()  # long commands say how far they are, on stderr
    try:
        if sys.argv[1:2] == ["bench"]:
            sys.argv[2:] = bench_cli.vllm_spellings(sys.argv[2:])  # --goodput ttft:500 tpot:50
            bench_cli.check_repeated(app, sys.argv[2:])
            for note in bench_cli.deprecated_flags(sys.argv[2:]):
                err.print(
                    Text.assemble(("warning:", "yellow"), " ", note),
                    highlight=False,
                    soft_wrap=True,
                )
        app()
    except SchedkitError as exc:
        print_error(str(exc))
        sys.exit(getattr(exc, "exit_code", 2))


if __name__ == "__main__":
    main()


__all__ = ["app", "describe_policies", "main", "print_error"]
