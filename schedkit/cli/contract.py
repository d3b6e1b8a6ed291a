"""``schedkit contract``: a policy through every contract scenario on every engine
installed here (:mod:`schedkit.testing.contract_run`), one table, exit 1 on a difference."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from schedkit.errors import SchedkitError

if TYPE_CHECKING:
    from schedkit.testing.contract_run import ContractEngine, Row

CONTRACT_FAILED = 1


def contract(
    policy: Annotated[str, typer.Argument(help="Policy, composition 'a+b', or config file.")],
    options: Annotated[
        str | None, typer.Option(help='Options as JSON: {"policy-name": {...}}.')
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(help="Only this engine (repeat); default: every engine installed here."),
    ] = None,
    scenario: Annotated[
        list[str] | None, typer.Option(help="Only this contract scenario (repeat).")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            help="A local model directory: engines that need a model run it (the real vLLM"
            " CPU engine runs only with one; SGLang builds a tiny random one without)."
        ),
    ] = None,
) -> None:
    """Run a policy through every contract scenario on the simulator and on every engine
    installed here; exit 1 when an engine breaks the contract or decides otherwise than
    the simulator (beyond what the capability matrix allows)."""
    from schedkit.cli.policy_args import config_with_options
    from schedkit.facade import PolicyFacade
    from schedkit.testing.contract import SCENARIOS
    from schedkit.testing.contract_run import installed_engines, run_contract

    config = config_with_options(policy, options)
    implemented = PolicyFacade.from_config(config).implemented  # a bad selection fails here
    if model is not None:
        from schedkit.bench.engines.requests import model_info

        model_info(str(model), "contract")  # a bad directory fails here, saying why
    engines, problems = installed_engines(model)
    engines = _chosen(engines, engine)
    scenarios = [s for s in SCENARIOS if not scenario or s.name in scenario]
    unknown = sorted(set(scenario or ()) - {s.name for s in SCENARIOS})
    if unknown:
        names = ", ".join(s.name for s in SCENARIOS)
        raise SchedkitError(f"unknown scenario {unknown[0]!r}; scenarios: {names}")
    console = Console()
    console.print(
        Text(f"{config.label}: {len(scenarios)} scenarios on {', '.join(e.name for e in engines)}")
    )
    for problem in problems:
        console.print(Text(f"not run: {problem}"), style="yellow")
    rows = run_contract(config, engines, scenarios)
    table = Table("scenario", *(e.name for e in engines))
    for s in scenarios:
        found = {r.engine: r for r in rows if r.scenario == s.name}
        table.add_row(s.name, *(_cell(found[e.name]) for e in engines))
    console.print(table)
    _notes(console, engines, rows, implemented)
    failed = [r for r in rows if not r.ok]
    for r in failed:
        console.print(Text(f"{r.engine}, {r.scenario}: {r.detail}"), style="bold red")
    if failed:
        raise typer.Exit(CONTRACT_FAILED)


def _notes(
    console: Console, engines: list[ContractEngine], rows: list[Row], implemented: frozenset[str]
) -> None:
    """What differs by design, per engine: its note, the hooks the policy uses that the
    capability matrix says it honours in part (warned once here, not at every engine
    start), and what a partial rule left uncompared."""
    from schedkit.capabilities import differences

    for e in engines:
        if e.note:
            console.print(Text(f"{e.name}: {e.note}"), style="dim")
        partial = [hook for hook, _ in differences(implemented, e.column)]
        if partial:
            console.print(
                Text(
                    f"{e.name}: the policy uses {', '.join(partial)}, which {e.column} honours"
                    " only in part (docs/hooks.md, capability matrix)"
                ),
                style="yellow",
            )
    starred = [r for r in rows if r.ok and r.note]
    if starred:
        console.print(Text("kept*: kept, but the matrix lets this differ (not compared):"))
    for r in starred:
        console.print(Text(f"  {r.engine}, {r.scenario}: {r.note}"), style="dim")


def _chosen(engines: list[ContractEngine], names: list[str] | None) -> list[ContractEngine]:
    if not names:
        return engines
    known = {e.name: e for e in engines}
    missing = [n for n in names if n not in known]
    if missing:
        raise SchedkitError(
            f"engine {missing[0]!r} is not installed here; installed: {', '.join(known)}"
        )
    return [known["sim"], *(known[n] for n in names if n != "sim")]


def _cell(row: Row) -> Text:
    if not row.ok:
        return Text("DIFFERS", style="bold red")
    return Text("kept*" if row.note else "kept", style="green")
