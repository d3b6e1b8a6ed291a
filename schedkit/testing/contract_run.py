"""The contract for policy authors, on every engine installed here: ``schedkit contract``.

A policy (a name, a composition ``a+b`` or a config file, with its options) runs through
every contract scenario (:data:`schedkit.testing.contract.SCENARIOS`) on the simulator and
on each engine an installed adapter registers in the entry-point group
``schedkit.contract``: a callable taking the model path given to the command (or None)
and returning :class:`ContractEngine` objects. Each run must keep the contract
(:func:`check_outcome`) and decide as the simulator did, by one rule per capability-matrix
entry (:data:`RULES`); where the matrix says ``partial`` for an engine, the adapter gives
the rule that encodes the difference (``ContractEngine.partial``, which a test holds to
the matrix), and a rule that leaves something uncompared says what, in the row's note.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path

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

__all__ = [
    "CONTRACT_GROUP",
    "RULES",
    "Case",
    "ContractEngine",
    "Relaxed",
    "Row",
    "Rule",
    "admission_order_of",
    "assert_contract",
    "fresh",
    "installed_engines",
    "order_unless_learning_from_reports",
    "order_unless_time_bound",
    "run_contract",
    "same_admission_order",
    "same_batches",
    "same_finishes",
    "same_rejections",
    "same_victims",
    "victims_where_shown_alike",
]

CONTRACT_GROUP = "schedkit.contract"  # entry points: name -> (model | None) -> [ContractEngine]


@dataclass(frozen=True)
class Case:
    """What a rule judges: an engine's outcome of ``scenario`` (``other``), the
    simulator's (``sim``), the hooks the policies implement, and whether their decisions
    depend on the pace of time (``time_bound``)."""

    scenario: Scenario
    sim: Outcome
    other: Outcome
    implemented: frozenset[str]
    # the policies decide otherwise on the simulator when time runs at another pace
    # (every arrival and step 20 times as long, or as short) or their clock reads late
    # (100 steps): they read waits or deadlines
    time_bound: bool = False
    # a policy reads the prefix cache's content (``EngineView.cached_tokens`` in its
    # ``fields``), which an engine whose steps are not the simulator's fills at its pace
    cache_bound: bool = False


Rule = Callable[[Case], str]
"""Compares a case's outcomes: raises AssertionError naming the first difference;
returns what it left uncompared, or ""."""


@dataclass(frozen=True)
class Relaxed:
    """An engine's rule for a matrix entry in place of the full one, and the matrix
    entry whose note for the engine says why (``tests/test_contract_run.py`` holds the
    note there)."""

    rule: Rule
    because: str


@dataclass(frozen=True)
class ContractEngine:
    """One engine the contract runs a policy on. ``run`` replays a scenario with the
    configured policies (fresh instances: :func:`fresh`); ``column`` is the engine's
    column of the capability matrix; ``same_batches``: its every step schedules as the
    simulator's (compared batch by batch); ``partial``: the rule in place of the full
    one for each matrix entry the engine cannot honour exactly, with the matrix entry
    saying why; ``note``: what differs by design (shown under the table)."""

    name: str
    run: Callable[[Scenario, SchedkitConfig], Outcome]
    column: str
    same_batches: bool = False
    partial: Mapping[str, Relaxed] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        """A relaxed rule stands only where the capability matrix says what differs."""
        from schedkit.capabilities import MATRIX

        for entry, relaxed in self.partial.items():
            if entry not in RULES:
                raise ValueError(f"{self.name}: no rule {entry!r} to relax; rules: {list(RULES)}")
            cell = MATRIX.get(relaxed.because, {}).get(self.column)
            if cell is None or not cell.note:
                raise ValueError(
                    f"{self.name}: relaxes {entry} because of {relaxed.because!r}, but the"
                    f" capability matrix says nothing of it for {self.column!r}"
                )


def fresh(config: SchedkitConfig) -> list[tuple[str, Policy]]:
    """New instances of the configured policies, with their options (what an in-process
    driver installs)."""
    return list(PolicyFacade.from_config(config).policies)


def _sim(scenario: Scenario, config: SchedkitConfig) -> Outcome:
    return run_sim(scenario, fresh(config))


SIM = ContractEngine("sim", _sim, "sim", same_batches=True)


# -------------------------------------------------------------------------
# The rules: one per capability-matrix entry that decides or observes
# -------------------------------------------------------------------------


def same_rejections(case: Case) -> str:
    """admit_request: the same requests rejected, for the same reasons."""
    sim, other = case.sim, case.other
    assert sim.rejected == other.rejected, f"rejections {other.rejected}, sim {sim.rejected}"
    return ""


def same_finishes(case: Case) -> str:
    """on_request_finished: every request ends as on the simulator, with its output."""
    sim, other = case.sim, case.other
    assert sim.finished == other.finished, f"finish reasons {other.finished}, sim {sim.finished}"
    assert sim.output_tokens == other.output_tokens, (
        f"output tokens {other.output_tokens}, sim {sim.output_tokens}"
    )
    return ""


def same_admission_order(case: Case) -> str:
    """order_waiting (and waiting_key): requests are first scheduled in the same order."""
    sim, other = case.sim, case.other
    assert sim.admitted == other.admitted, f"admission order {other.admitted}, sim {sim.admitted}"
    return ""


def same_victims(case: Case) -> str:
    """select_victims (and victim_key): the hook is shown the same request needing room
    and the same running requests with the same computed tokens, and the same requests
    are preempted, in the same order."""
    sim, other = case.sim, case.other
    a, b = sim.recorder.victim_calls, other.recorder.victim_calls
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        assert x == y, f"victim call {i} shown needing {y[0]}, running {y[1]}; sim {x[0]}, {x[1]}"
    assert len(a) == len(b), f"{len(b)} victim calls, sim {len(a)}"
    victims, expected = _victims(other), _victims(sim)
    assert victims == expected, f"victims {victims}, sim {expected}"
    return ""


def _victims(outcome: Outcome) -> list[list[str]]:
    return [step for step in outcome.preempted if step]


def same_batches(case: Case) -> str:
    """plan_batch (and select_evictions, whose prefix hits change later batches): on an
    engine that steps as the simulator, every batch and its preemptions."""
    sim, other = case.sim, case.other
    try:
        compare_outcomes(sim, other, case.scenario)
    except AssertionError as exc:  # without compare_outcomes' "scenario: a vs b: "
        raise AssertionError(str(exc).split(f"{sim.engine} vs {other.engine}: ", 1)[-1]) from exc
    return ""


RULES: Mapping[str, Rule] = {
    "plan_batch": same_batches,
    "order_waiting": same_admission_order,
    "select_victims": same_victims,
    "admit_request": same_rejections,
    "on_request_finished": same_finishes,
}
"""The full rule of each matrix entry compared, the most detailed first (its failure is
the first difference shown). The key hooks ride on their list hook's row: waiting_key on
order_waiting, victim_key on select_victims; evictions show in batches."""


def victims_where_shown_alike(case: Case) -> str:
    """A partial select_victims rule: each victim call shown the same needing request
    and running requests as the simulator's call of the same index must preempt as it
    did; the others are not compared (the note says which)."""
    sim, other = case.sim, case.other
    a, b = sim.recorder.victim_calls, other.recorder.victim_calls
    va, vb = _victims(sim), _victims(other)
    skipped = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x is None or y is None or (x[0], _ids(x)) != (y[0], _ids(y)):
            skipped.append(_shown(i, y, x))
            continue
        if i < len(va) and i < len(vb):
            assert va[i] == vb[i], (
                f"victim call {i} (shown as on sim) preempted {vb[i]}, sim {va[i]}"
            )
    return "; ".join(skipped)


VictimCall = tuple[str, list[tuple[str, int]]]  # needing, running with computed tokens


def _ids(call: VictimCall) -> list[str]:
    return [rid for rid, _ in call[1]]


def _shown(i: int, y: VictimCall | None, x: VictimCall | None) -> str:
    def say(call: VictimCall | None) -> str:
        if call is None:
            return "no call"
        return f"needing {call[0]} of {','.join(_ids(call))}"

    return f"victim call {i} not compared: {say(y)}, sim {say(x)}"


def admission_order_of(keep: Callable[[Scenario], set[str]], what: str) -> Rule:
    """A partial order_waiting rule: the same requests admitted, and the order among
    those ``keep`` picks the same; ``what`` names the others for the note."""

    def rule(case: Case) -> str:
        sim, other, scenario = case.sim, case.other, case.scenario
        kept = keep(scenario)
        ours = [r for r in other.admitted if r in kept]
        theirs = [r for r in sim.admitted if r in kept]
        assert ours == theirs, f"admission order {ours}, sim {theirs}"
        assert sorted(other.admitted) == sorted(sim.admitted), (
            f"admitted {sorted(other.admitted)}, sim {sorted(sim.admitted)}"
        )
        left = sorted({r.request_id for r in scenario.requests} - kept)
        return f"order of {', '.join(left)} not compared ({what})" if left else ""

    return rule


def order_unless_learning_from_reports(case: Case) -> str:
    """A partial order_waiting rule for an engine whose step reports reach the policies
    a step late: the admission order of a policy that learns from them (it observes
    ``on_step_finished``) is not compared, only who was admitted."""
    if "on_step_finished" not in case.implemented:
        return same_admission_order(case)
    a, b = case.sim.admitted, case.other.admitted
    assert sorted(a) == sorted(b), f"admitted {sorted(b)}, sim {sorted(a)}"
    if a != b:
        return f"admission order {b}, sim {a}: the policy learns from step reports"
    return ""


def order_unless_time_bound(base: Rule, pace: str) -> Rule:
    """A partial order_waiting rule for an engine whose steps are not the simulator's
    (``pace`` says how its clock and step reports run): ``base``, but where the order
    differs and the policy's decisions depend on the pace of time or learn from step
    reports, only who was admitted is compared, and the note says why."""

    def rule(case: Case) -> str:
        try:
            return base(case)
        except AssertionError:
            if not (case.time_bound or case.cache_bound or "on_step_finished" in case.implemented):
                raise
        a, b = case.sim.admitted, case.other.admitted
        assert sorted(a) == sorted(b), f"admitted {sorted(b)}, sim {sorted(a)}"
        why = (
            "reads waits or deadlines"
            if case.time_bound
            else "reads the prefix cache's content"
            if case.cache_bound
            else "learns from step reports"
        )
        return f"admission order {b}, sim {a}: the policy {why}, and {pace}"

    return rule


# -------------------------------------------------------------------------
# Running it
# -------------------------------------------------------------------------


def installed_engines(model: Path | None = None) -> tuple[list[ContractEngine], list[str]]:
    """The simulator and every engine the installed adapters register (``model``: a
    model directory for the engines that run one), and a line for each registration
    that could not be loaded (its engine is then not run)."""
    engines, problems = [SIM], []
    for ep in metadata.entry_points(group=CONTRACT_GROUP):
        try:
            found = ep.load()(model)
        except Exception as exc:  # an adapter whose engine is not importable here
            problems.append(f"{ep.name}: {type(exc).__name__}: {exc}")
            continue
        engines.extend(found)
    return engines, problems


@dataclass(frozen=True)
class Row:
    """One scenario on one engine: ``ok``, the first difference or broken rule
    (``detail``), and what the engine's partial rules left uncompared (``note``)."""

    scenario: str
    engine: str
    ok: bool
    detail: str = ""
    note: str = ""


def run_contract(
    config: SchedkitConfig | str,
    engines: Sequence[ContractEngine],
    scenarios: Sequence[Scenario] = SCENARIOS,
) -> list[Row]:
    """``config``'s policies through ``scenarios`` on ``engines`` (the simulator first:
    every other engine is compared with it)."""
    cfg = load_config(config)
    facade = PolicyFacade.from_config(cfg)
    cache_bound = any("EngineView.cached_tokens" in p.fields for _, p in facade.policies)
    rows = []
    with _quiet_launch_warnings():
        for scenario in scenarios:
            rows.extend(_run_scenario(scenario, cfg, engines, facade.implemented, cache_bound))
    return rows


def _run_scenario(
    scenario: Scenario,
    cfg: SchedkitConfig,
    engines: Sequence[ContractEngine],
    implemented: frozenset[str],
    cache_bound: bool = False,
) -> list[Row]:
    """``scenario`` on the simulator, then on every other engine, compared with it."""
    rows = []
    sim = _sim(scenario, cfg)
    time_bound = is_time_bound(scenario, cfg, sim)
    rows.append(judge(Case(scenario, sim, sim, implemented, time_bound, cache_bound), SIM))
    for engine in engines:
        if engine.name == SIM.name:
            continue
        try:
            outcome = engine.run(scenario, cfg)
        except Exception as exc:  # the engine broke: say so, go on
            rows.append(Row(scenario.name, engine.name, False, f"{type(exc).__name__}: {exc}"))
            continue
        case = Case(scenario, sim, outcome, implemented, time_bound, cache_bound)
        rows.append(judge(case, engine))
    return rows


_PACES = (0.05, 20.0)
_LATE_STEPS = 100  # a clock read this many steps late: a ratio of waits decides otherwise


def is_time_bound(scenario: Scenario, cfg: SchedkitConfig, sim: Outcome) -> bool:
    """Whether ``cfg``'s policies decide otherwise on the simulator (``sim``: their
    outcome there) when time runs at another pace, or when their clock reads late: they
    read waits, deadlines or step times."""
    decided = _decisions(sim)
    if any(_decisions(_sim(_paced(scenario, f), cfg)) != decided for f in _PACES):
        return True
    late = run_sim(scenario, fresh(cfg), late_s=_LATE_STEPS * scenario.step_s)
    return _decisions(late) != decided


def _paced(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with time running ``factor`` times as slow: every arrival and step
    that much longer. A policy reading waits, deadlines or step times against a fixed
    threshold decides otherwise at one pace or the other; no other policy does."""
    requests = tuple(replace(r, arrival_s=factor * r.arrival_s) for r in scenario.requests)
    return replace(scenario, requests=requests, step_s=factor * scenario.step_s)


def _decisions(outcome: Outcome) -> tuple[object, ...]:
    return (outcome.steps, outcome.preempted, outcome.rejected)


class _LaunchWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "(docs/hooks.md, capability matrix)" not in record.getMessage()


@contextlib.contextmanager
def _quiet_launch_warnings() -> Iterator[None]:
    """Without the capability warning an adapter logs at every engine start (one per
    scenario here); ``schedkit contract`` says it once per engine."""
    quiet = _LaunchWarnings()
    logger = logging.getLogger("schedkit")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def judge(case: Case, engine: ContractEngine) -> Row:
    """``case`` on ``engine``: the contract, then each matrix entry's rule."""
    scenario, notes = case.scenario, []
    try:
        check_outcome(scenario, case.other)
        if engine.name != SIM.name:
            for entry, full in RULES.items():
                if entry == "plan_batch" and not engine.same_batches:
                    continue
                relaxed = engine.partial.get(entry)
                rule = full if relaxed is None else relaxed.rule
                try:
                    said = rule(case)
                except AssertionError as exc:
                    raise AssertionError(f"{entry}: {exc}") from exc
                if said:
                    notes.append(f"{entry}: {said}")
    except AssertionError as exc:
        return Row(scenario.name, engine.name, False, str(exc).split("\n")[0])
    except Exception as exc:  # a driver's outcome the checks could not read: say so
        return Row(scenario.name, engine.name, False, f"{type(exc).__name__}: {exc}")
    return Row(scenario.name, engine.name, True, note="; ".join(notes))


def assert_contract(
    config: SchedkitConfig | str | Mapping[str, object],
    engines: Sequence[ContractEngine] | None = None,
    scenarios: Sequence[Scenario] = SCENARIOS,
) -> list[Row]:
    """Run the contract and fail (AssertionError listing every difference) unless every
    engine kept it: what an author's test calls (also as the ``schedkit_contract``
    fixture of :mod:`schedkit.testing.pytest_plugin`). ``engines``: every engine
    installed here by default. The rows, when all passed."""
    cfg = (
        config
        if isinstance(config, SchedkitConfig | str)
        else SchedkitConfig.model_validate(config)
    )
    if engines is None:
        engines, problems = installed_engines()
        assert not problems, f"engines that could not be loaded: {problems}"
    rows = run_contract(cfg, engines, scenarios)
    failed = [f"{r.engine}, {r.scenario}: {r.detail}" for r in rows if not r.ok]
    assert not failed, "the contract failed:\n" + "\n".join(failed)
    return rows
