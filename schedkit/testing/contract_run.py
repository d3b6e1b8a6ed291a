"""The contract for policy authors, on every engine installed here: ``schedkit contract``.

A policy (a name, a composition ``a+b`` or a config file, with its options) runs through
every contract scenario (:data:`schedkit.testing.contract.SCENARIOS`) on the simulator and
on each engine an installed adapter registers in the entry-point group
``schedkit.contract`` (a callable returning :class:`ContractEngine` objects). Each run must
keep the contract (:func:`check_outcome`) and decide as the simulator did: the same batch
at every step on an engine that schedules step by step as the simulator, the same
rejections, finishes and outputs on one that cannot (its ``differs`` says why, in the
capability matrix's words).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

from schedkit.config import SchedkitConfig, load_config
from schedkit.facade import PolicyFacade
from schedkit.policy import Policy
from schedkit.testing.contract import (
    SCENARIOS,
    Outcome,
    Scenario,
    check_outcome,
    compare_outcomes,
    run_sim,
)

__all__ = ["CONTRACT_GROUP", "ContractEngine", "Row", "installed_engines", "run_contract"]

CONTRACT_GROUP = "schedkit.contract"  # entry points: name -> () -> list[ContractEngine]

Policies = Sequence[tuple[str, Policy]]


@dataclass(frozen=True)
class ContractEngine:
    """One engine the contract runs a policy on: ``run`` replays a scenario with fresh
    policy instances; ``same_batches``: its every step must schedule as the simulator's
    (else only the outcomes: rejections, finishes, outputs); ``differs``: what the
    capability matrix lets differ, shown with its results."""

    name: str
    run: Callable[[Scenario, Policies], Outcome]
    same_batches: bool = True
    differs: str = ""


SIM = ContractEngine("sim", run_sim)


def installed_engines() -> tuple[list[ContractEngine], list[str]]:
    """The simulator and every engine the installed adapters register, and a line for
    each registration that could not be loaded (its engine is then not run)."""
    engines, problems = [SIM], []
    for ep in metadata.entry_points(group=CONTRACT_GROUP):
        try:
            found = ep.load()()
        except Exception as exc:  # an adapter whose engine is not importable here
            problems.append(f"{ep.name}: {type(exc).__name__}: {exc}")
            continue
        engines.extend(found)
    return engines, problems


@dataclass(frozen=True)
class Row:
    """One scenario on one engine: ``ok``, and the first difference or broken rule."""

    scenario: str
    engine: str
    ok: bool
    detail: str = ""


def run_contract(
    config: SchedkitConfig | str,
    engines: Sequence[ContractEngine],
    scenarios: Sequence[Scenario] = SCENARIOS,
) -> list[Row]:
    """``config``'s policies through ``scenarios`` on ``engines`` (the simulator first:
    every other engine is compared with it)."""
    cfg = load_config(config)
    rows = []
    for scenario in scenarios:
        sim = run_sim(scenario, _fresh(cfg))
        rows.append(_judge(scenario, SIM, sim, sim))
        for engine in engines:
            if engine.name == SIM.name:
                continue
            try:
                outcome = engine.run(scenario, _fresh(cfg))
            except Exception as exc:  # the engine broke: say so, go on
                rows.append(Row(scenario.name, engine.name, False, f"{type(exc).__name__}: {exc}"))
                continue
            rows.append(_judge(scenario, engine, outcome, sim))
    return rows


def _fresh(cfg: SchedkitConfig) -> list[tuple[str, Policy]]:
    """New instances of the configured policies, with their options."""
    return list(PolicyFacade.from_config(cfg).policies)


def _judge(scenario: Scenario, engine: ContractEngine, outcome: Outcome, sim: Outcome) -> Row:
    try:
        check_outcome(scenario, outcome)
        if engine.name != SIM.name:
            if engine.same_batches:
                compare_outcomes(sim, outcome, scenario)
            else:
                _same_results(sim, outcome, scenario)
    except AssertionError as exc:
        return Row(scenario.name, engine.name, False, str(exc).split("\n")[0])
    return Row(scenario.name, engine.name, True)


def _same_results(a: Outcome, b: Outcome, scenario: Scenario) -> None:
    where = f"{scenario.name}: {a.engine} vs {b.engine}"
    assert a.rejected == b.rejected, f"{where}: rejections {a.rejected} vs {b.rejected}"
    assert a.finished == b.finished, f"{where}: finish reasons {a.finished} vs {b.finished}"
    assert a.output_tokens == b.output_tokens, f"{where}: output tokens differ"
