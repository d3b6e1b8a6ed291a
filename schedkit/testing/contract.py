"""The cross-engine contract suite: the same scripted scenarios through every engine.

A *scenario* is a short request stream (``TraceRequest``s, arrival times in seconds), an
engine config (``SimConfig``; 32-token blocks, which vLLM's CPU attention requires) and a
step time: every step lasts ``step_s`` seconds on
every engine, so arrival times mean the same step everywhere. A *driver* replays a
scenario through one engine with a set of policies and returns an ``Outcome``: what the
engine did (the batches it scheduled, whom it preempted, how each request ended) and
what the policies were told (every arrival, step report and finish, recorded by a
``ContractRecorder`` appended after the policies under test).

``check_outcome`` asserts what must hold on any engine: every request ends exactly once
with its full output (or its rejection), each scheduled token is reported to the
policies exactly once, arrivals and finishes are observed once per request,
``engine.num_running`` counts every request running across a step boundary (read at each
step report and arrival), and no KV block leaks. ``compare_outcomes`` asserts that two engines made the same decisions:
identical batches at every step where both engines schedule alike (the simulator and
vLLM's synchronous scheduler), else the same admissions, victims and per-request
outcomes. Adapter authors write a driver (``Driver``) and run ``SCENARIOS`` through it;
the simulator's driver is ``run_sim``.

    from schedkit.testing.contract import SCENARIOS, check_outcome, compare_outcomes, run_sim
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import Field

from schedkit import hookimpl
from schedkit.adapter.metadata_view import FROZEN_FIELDS
from schedkit.decisions import Admission, BatchBudget, StepReport
from schedkit.facade import PolicyFacade
from schedkit.policy import Policy, PolicyOptions
from schedkit.sim.config import SimConfig
from schedkit.views import BlockView, EngineView, ReplicaView, RequestView
from schedkit.workload import TraceRequest

__all__ = [
    "SCENARIOS",
    "ContractRecorder",
    "Driver",
    "Flaky",
    "Outcome",
    "Scenario",
    "Stalling",
    "check_outcome",
    "compare_outcomes",
    "run_sim",
]

# -------------------------------------------------------------------------
# Scenarios
# -------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A scripted request stream on a small engine."""

    name: str
    requests: tuple[TraceRequest, ...]
    config: SimConfig
    step_s: float = 0.01  # every step lasts this long on every engine
    what: str = ""


class FixedStep:
    """A cost model whose every step takes ``seconds``: steps line up across engines."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def step_time(self, prefill: int, decode: int, kv_tokens: int, attn: int = 0) -> float:
        return self.seconds

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        return self.seconds * k

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        return max(0, min(k_max, int(budget_s / self.seconds)))


def _req(
    rid: str,
    prompt: int,
    output: int,
    at: float = 0.0,
    **fields: Any,
) -> TraceRequest:
    return TraceRequest(rid, at, prompt, output, **fields)


def _scenarios() -> tuple[Scenario, ...]:
    return (*_queue_order_scenarios(), *_memory_scenarios(), *_tenant_and_slo_scenarios())


def _queue_order_scenarios() -> tuple[Scenario, ...]:
    """Who waits when more requests arrive than may run."""
    tenants = ("a", "b")
    return (
        Scenario(
            "arrival-order",
            tuple(
                _req(f"o{i}", p, 4, at=0.0, priority=prio, tenant=tenants[i % 2])
                for i, (p, prio) in enumerate(
                    [(200, 2), (40, 1), (120, 0), (16, 3), (90, 0), (300, 1), (60, 2)]
                )
            ),
            SimConfig(num_blocks=200, block_size=32, max_num_seqs=2, max_num_batched_tokens=512),
            what="seven requests at once, two may run: the order decides who waits",
        ),
        Scenario(
            "staggered",
            tuple(
                _req(f"s{i}", 32 + 48 * (i % 3), 6, at=0.01 * (i // 2), tenant=tenants[i % 2])
                for i in range(8)
            ),
            SimConfig(num_blocks=200, block_size=32, max_num_seqs=3, max_num_batched_tokens=128),
            what="arrivals over four steps while others decode",
        ),
        Scenario(
            "arrival-waits",
            (
                _req("w0", 64, 24, at=0.0),
                _req("w1", 320, 4, at=0.005),
                *(_req(f"w{i}", 32, 4, at=0.04 * (i - 1)) for i in range(2, 6)),
            ),
            SimConfig(num_blocks=200, block_size=32, max_num_seqs=1, max_num_batched_tokens=512),
            what="one request runs at a time; a long prompt waits while short ones keep"
            " arriving: an order by waits (aging, response ratio) reads arrival times"
            " against the engine clock",
        ),
    )


def _memory_scenarios() -> tuple[Scenario, ...]:
    """KV cache pressure, chunked prefill and prefix caching."""
    return (
        Scenario(
            "kv-pressure",
            tuple(_req(f"k{i}", 64, 40, at=0.0, priority=5 if i == 0 else 0) for i in range(4)),
            SimConfig(num_blocks=8, block_size=32, max_num_seqs=16, max_num_batched_tokens=512),
            what="four 64-token prompts fill the 8 blocks; decoding forces preemption",
        ),
        Scenario(
            "victims",
            tuple(
                _req(f"v{i}", 64, 120, at=0.01 * i, priority=9 if i == 0 else 0) for i in range(4)
            ),
            SimConfig(num_blocks=12, block_size=32, max_num_seqs=4, max_num_batched_tokens=512),
            what="four requests run at once and their decoding runs the 12 blocks out twice:"
            " the victim hook sees who needs room and each running request's computed"
            " tokens; v0 has the worst priority",
        ),
        Scenario(
            "chunked-prefill",
            tuple(_req(f"c{i}", 400 - 100 * i, 8, at=0.0) for i in range(3)),
            SimConfig(
                num_blocks=100,
                block_size=32,
                max_num_seqs=8,
                max_num_batched_tokens=256,
                long_prefill_token_threshold=96,
            ),
            what="long prompts prefilled in chunks under a token budget",
        ),
        Scenario(
            "lone-long-prompt",
            (_req("solo", 480, 8, at=0.0), _req("late", 16, 8, at=0.005)),
            SimConfig(
                num_blocks=100,
                block_size=32,
                max_num_seqs=8,
                max_num_batched_tokens=256,
                long_prefill_token_threshold=96,
            ),
            what="a long prompt alone under chunked prefill takes the whole token budget"
            " (nothing to starve, vLLM's rule) until a second request arrives",
        ),
        Scenario(
            "shared-prefix",
            tuple(_req(f"p{i}", 64, 4, at=0.01 * i, hash_ids=(i % 3, 10 + i)) for i in range(9)),
            SimConfig(
                num_blocks=7,
                block_size=32,
                max_num_seqs=4,
                max_num_batched_tokens=512,
                hash_block_tokens=32,
            ),
            what="three shared 32-token prefixes in a cache that must evict",
        ),
    )


def _tenant_and_slo_scenarios() -> tuple[Scenario, ...]:
    """Tenants competing, and requests with SLO targets."""
    return (
        Scenario(
            "two-tenant",
            tuple(
                [_req(f"f{i}", 48, 8, at=0.0, tenant="flood") for i in range(8)]
                + [_req(f"q{i}", 48, 8, at=0.02 * i, tenant="quiet") for i in range(3)]
            ),
            SimConfig(num_blocks=200, block_size=32, max_num_seqs=2, max_num_batched_tokens=256),
            what="a flooding tenant ahead of a quiet one",
        ),
        Scenario(
            "slo-mix",
            tuple(
                _req(
                    f"l{i}",
                    64 * (1 + i % 4),
                    4 + i % 3,
                    at=0.01 * i,
                    slo_ttft_ms=(2.0, 1000.0, None)[i % 3],
                    slo_tpot_ms=(None, 20.0)[i % 2],
                )
                for i in range(8)
            ),
            SimConfig(num_blocks=200, block_size=32, max_num_seqs=2, max_num_batched_tokens=128),
            what="requests with tight, loose and no SLO targets",
        ),
    )


SCENARIOS: tuple[Scenario, ...] = _scenarios()

# -------------------------------------------------------------------------
# What the policies were told
# -------------------------------------------------------------------------


class ContractRecorder(Policy):
    """Records every observation; appended after the policies under test (observers are
    all called, so it decides nothing and sees everything)."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.arrived: Counter[str] = Counter()
        self.reported: Counter[str] = Counter()  # tokens per request over all step reports
        self.reports = 0
        self.finished: dict[str, list[str]] = {}
        self.preempted: list[str] = []
        # per step report: the requests it scheduled, and engine.num_running then
        self.steps: list[tuple[list[str], int]] = []
        # per arrival: how many steps had been reported, and engine.num_running then
        self.arrivals: list[tuple[int, int]] = []
        # per arrival: the request's arrival_time and engine.clock, which share a clock
        self.clocks: dict[str, tuple[float, float]] = {}
        # per arrival: engine.cached_tokens(request), the prefix cache's hit then
        self.cached: dict[str, int] = {}
        # per select_victims call: the request needing room, and each running request
        # with its computed tokens (the facade's watch, set by facade_of)
        self.victim_calls: list[tuple[str, list[tuple[str, int]]]] = []
        # views kept from arrival, read again at every step report once their request
        # finished: each must read as it did at its finish (docs/hooks.md)
        self._kept: dict[str, RequestView] = {}
        self._at_finish: dict[str, tuple[Any, ...]] = {}
        self.drifted: list[str] = []  # "<request>: <field> <at finish> -> <later>"

    @hookimpl
    def on_request_arrived(self, request: RequestView, engine: EngineView) -> None:
        self.arrived[request.request_id] += 1
        self.arrivals.append((len(self.steps), engine.num_running))
        self.clocks[request.request_id] = (request.arrival_time, engine.clock)
        self.cached[request.request_id] = engine.cached_tokens(request)
        self._kept[request.request_id] = request

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        self.reports += 1
        for request, tokens in zip(report.scheduled, report.num_scheduled_tokens, strict=True):
            self.reported[request.request_id] += tokens
        self.preempted.extend(r.request_id for r in report.preempted)
        self.steps.append(([r.request_id for r in report.scheduled], engine.num_running))
        self._check_kept()

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        self.finished.setdefault(request.request_id, []).append(reason)
        kept = self._kept.get(request.request_id)
        if kept is not None:
            self._at_finish[request.request_id] = _last_state(kept)

    def _check_kept(self) -> None:
        """Each finished request's kept view reads as it did at its finish."""
        for rid, then in list(self._at_finish.items()):
            now = _last_state(self._kept[rid])
            if now != then:
                changed = next(i for i, (a, b) in enumerate(zip(then, now, strict=True)) if a != b)
                field = _KEPT_FIELDS[changed]
                self.drifted.append(f"{rid}: {field} {then[changed]!r} -> {now[changed]!r}")
                del self._at_finish[rid]  # once per request

    def watch(self, hook: str, args: tuple[Any, ...]) -> None:
        """What the engine showed the policies' victim hook (``PolicyFacade.watch``)."""
        if hook == "select_victims":
            running, needing, _ = args
            shown = [(r.request_id, r.num_computed_tokens) for r in running]
            self.victim_calls.append((needing.request_id, shown))


# every RequestView field: those fixed for a request's life, and those an engine may
# change once it finished (which the adapter kit freezes)
_KEPT_FIELDS = ("request_id", "tenant", "slo_ttft_ms", "slo_tpot_ms", *FROZEN_FIELDS)


def _last_state(view: RequestView) -> tuple[Any, ...]:
    """Every field of ``view``, read now (a read that raises reads as its error)."""
    values: list[Any] = []
    for name in _KEPT_FIELDS:
        try:
            value = getattr(view, name)
        except Exception as exc:
            value = f"raised {type(exc).__name__}"
        values.append(
            tuple(value) if name == "block_hashes" and not isinstance(value, str) else value
        )
    return tuple(values)


class Flaky(Policy):
    """Implements every decision hook; raises on about ``fault_rate`` of calls and answers
    nonsense on as many, otherwise has no opinion. Put first, it must change nothing."""

    class Options(PolicyOptions):
        seed: int = 0
        fault_rate: float = 0.2

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.rng = random.Random(self.options.seed)  # type: ignore[attr-defined]

    def _answer(self, nonsense: Any) -> Any:
        roll = self.rng.random()
        rate: float = self.options.fault_rate  # type: ignore[attr-defined]
        if roll < rate:
            raise RuntimeError("flaky policy")
        if roll < 2 * rate:
            return nonsense
        return None

    @hookimpl
    def admit_request(self) -> Admission | None:
        return self._answer("yes")  # type: ignore[no-any-return]

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView] | None:
        return self._answer(list(waiting)[1:] + list(waiting)[:1] * 2)  # type: ignore[no-any-return]

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget | None:
        nonsense = dataclasses.replace(default, token_budget=default.token_budget * 2)
        return self._answer(nonsense)  # type: ignore[no-any-return]

    @hookimpl
    def select_victims(self, running: Sequence[RequestView]) -> list[RequestView] | None:
        return self._answer([running[0], running[0]])  # type: ignore[no-any-return]

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView]) -> list[BlockView] | None:
        return self._answer([])  # type: ignore[no-any-return]


class Stalling(Policy):
    """Sleeps ``stall_s`` in each of its first ``stalls`` ordering calls (then orders the
    shortest prompt first) and exits the process (``SystemExit(3)``, a policy calling
    ``sys.exit()``) from every ``exit_every``-th admission: faults that stalled or stopped
    an engine before ``hook_budget_hard``. With it, every request must still finish."""

    class Options(PolicyOptions):
        stall_s: float = Field(default=2.0, ge=0.0)
        stalls: int = Field(default=2, ge=0)
        exit_every: int = Field(default=5, ge=1)

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.orders = 0
        self.admits = 0

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        self.admits += 1
        if self.admits % self.options.exit_every == 0:  # type: ignore[attr-defined]
            raise SystemExit(3)
        return None

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        self.orders += 1
        if self.orders <= self.options.stalls:  # type: ignore[attr-defined]
            time.sleep(self.options.stall_s)  # type: ignore[attr-defined]
        return sorted(waiting, key=lambda r: r.num_prompt_tokens)


class RouteByLength(Policy):
    """Routes each request to instance ``num_prompt_tokens % len(replicas)`` of a
    disaggregated pool, so a test can tell where each went. It raises (the facade then
    counts an error and the router's default decides) when the pool is not one role's,
    or when a prefill leg is not shown as one token, as ``schedkit.edge.pd`` sends
    it (both protocols). The prefill/decode pair tests of vLLM and SGLang route with it."""

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        roles = {r.role for r in replicas}
        if roles not in ({"prefill"}, {"decode"}):
            raise ValueError(f"a pool of roles {sorted(roles)}")
        if roles == {"prefill"} and request.max_tokens != 1:
            raise ValueError(f"a prefill leg of max_tokens={request.max_tokens}")
        return request.num_prompt_tokens % len(replicas)


# -------------------------------------------------------------------------
# What an engine did
# -------------------------------------------------------------------------


@dataclass
class Outcome:
    """One scenario on one engine."""

    engine: str
    steps: list[dict[str, int]] = field(default_factory=list)  # scheduled tokens per step
    preempted: list[list[str]] = field(default_factory=list)  # per step, sorted
    admitted: list[str] = field(default_factory=list)  # order of first scheduling
    finished: dict[str, str] = field(default_factory=dict)  # id -> finish reason
    output_tokens: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # id -> reason
    blocks_leaked: int = 0  # KV blocks not free (or evictable) at the end
    policy_errors: int = 0
    recorder: ContractRecorder = field(default_factory=ContractRecorder)
    batches_comparable: bool = True  # False where the engine's steps differ by design

    @property
    def scheduled(self) -> Counter[str]:
        """Tokens the engine scheduled per request, from its own step outputs."""
        total: Counter[str] = Counter()
        for step in self.steps:
            total.update(step)
        return total


class Driver(Protocol):
    """Replays ``scenario`` through one engine with ``policies`` (fresh instances) and
    the recorder appended last."""

    def __call__(self, scenario: Scenario, policies: Sequence[tuple[str, Policy]]) -> Outcome: ...


def facade_of(policies: Sequence[tuple[str, Policy]], recorder: ContractRecorder) -> PolicyFacade:
    """The facade a driver installs: ``policies``, then ``recorder``, which also watches
    what the victim hook is shown."""
    facade = PolicyFacade([*policies, ("contract-recorder", recorder)])
    facade.watch = recorder.watch
    return facade


def check_outcome(scenario: Scenario, outcome: Outcome, aborted: Sequence[str] = ()) -> None:
    """What must hold on any engine, whatever the policies decided. ``aborted``: requests
    the driver aborted, which end ``"aborted"`` with at most their output."""
    where = f"{scenario.name} on {outcome.engine}"
    ids = [r.request_id for r in scenario.requests]
    rec = outcome.recorder
    assert sorted(outcome.finished) == sorted(ids), f"{where}: not every request ended"
    for r in scenario.requests:
        rid = r.request_id
        assert rec.arrived[rid] == 1, f"{where}: {rid} arrival observed {rec.arrived[rid]}x"
        assert rec.finished.get(rid) == [outcome.finished[rid]], (
            f"{where}: {rid} finish observed as {rec.finished.get(rid)},"
            f" the engine says {outcome.finished[rid]!r}"
        )
        if rid in aborted and rid not in outcome.rejected:
            assert outcome.finished[rid] == "aborted", (
                f"{where}: {rid} ended {outcome.finished[rid]}"
            )
            assert outcome.output_tokens.get(rid, 0) <= r.output_tokens
        elif rid in outcome.rejected:
            assert outcome.finished[rid] == "rejected", f"{where}: {rid} rejected, not finished so"
            assert outcome.scheduled[rid] == 0, f"{where}: rejected {rid} was scheduled"
        else:
            assert outcome.finished[rid] == "length", (
                f"{where}: {rid} ended {outcome.finished[rid]}"
            )
            assert outcome.output_tokens[rid] == r.output_tokens, (
                f"{where}: {rid} generated {outcome.output_tokens[rid]} of {r.output_tokens} tokens"
            )
    scheduled = outcome.scheduled
    assert dict(rec.reported) == {k: v for k, v in scheduled.items() if v}, (
        f"{where}: step reports disagree with what the engine scheduled:"
        f" reported {dict(rec.reported)}, scheduled {dict(scheduled)}"
    )
    preempted = sorted(r for step in outcome.preempted for r in step)
    assert sorted(rec.preempted) == preempted, f"{where}: preemptions reported {rec.preempted}"
    assert len(rec.arrivals) == sum(rec.arrived.values()), (
        f"{where}: {len(rec.arrivals)} arrivals carry num_running, of"
        f" {sum(rec.arrived.values())} observed (does the driver bring them back?)"
    )
    _check_running(rec.steps, rec.arrivals, where, set(aborted))
    _check_clocks(scenario, rec.clocks, where)
    for r in scenario.requests:
        hit = rec.cached.get(r.request_id, 0)
        assert 0 <= hit < max(r.prompt_tokens, 1), (
            f"{where}: engine.cached_tokens({r.request_id}) read {hit} at arrival, of"
            f" {r.prompt_tokens} prompt tokens (at most all but the last may hit)"
        )
    assert not rec.drifted, (
        f"{where}: a view kept after its request finished changed: {rec.drifted[0]}"
        " (it must read the request's last state)"
    )
    assert outcome.blocks_leaked == 0, f"{where}: {outcome.blocks_leaked} KV blocks leaked"


def _check_clocks(scenario: Scenario, clocks: dict[str, tuple[float, float]], where: str) -> None:
    """A request's ``arrival_time`` is its arrival on the engine clock, which the engine
    view's ``clock`` reads (docs/hooks.md: they share a clock): the scenario's arrival
    time, and no later than the clock when the policies are told of it. A wait
    (``clock - arrival_time``) is then never negative, on any engine."""
    for r in scenario.requests:
        assert r.request_id in clocks, f"{where}: {r.request_id}'s arrival not observed"
        arrival, clock = clocks[r.request_id]
        assert abs(arrival - r.arrival_s) <= 1e-6, (
            f"{where}: {r.request_id}'s arrival_time is {arrival}, the scenario's is"
            f" {r.arrival_s}: arrival times are not on the engine clock"
        )
        assert clock >= arrival - 1e-9, (
            f"{where}: {r.request_id} arrived at {arrival} but engine.clock read {clock}"
        )


def _check_running(
    steps: Sequence[tuple[Sequence[str], int]],
    arrivals: Sequence[tuple[int, int]],
    where: str,
    aborted: set[str],
) -> None:
    """``engine.num_running`` counts the requests admitted and not finished, when a step
    is reported (the step file's ``num_running``, which calibration reads to tell busy
    gaps from idle ones) and when a request arrives (what admission control reads): a
    request scheduled in a step and the next ran across the boundary between them
    (unless aborted in between, its batch in flight), and after the last step nothing
    runs unless a request was aborted."""

    def carried(i: int) -> int:  # requests running between step reports i and i + 1
        return len(set(steps[i][0]) & set(steps[i + 1][0]) - aborted)

    for i in range(len(steps) - 1):
        assert steps[i][1] >= carried(i), (
            f"{where}: step report {i} says {steps[i][1]} running, but {carried(i)} of"
            f" its requests ran in the next step too"
        )
    for reported, running in arrivals:
        if 0 < reported < len(steps):
            assert running >= carried(reported - 1), (
                f"{where}: a request arriving after step report {reported - 1} saw"
                f" {running} running, but {carried(reported - 1)} requests ran in that"
                f" step and the next"
            )
    if steps and not aborted:
        assert steps[-1][1] == 0, (
            f"{where}: {steps[-1][1]} running after the last step, when every request ended"
        )


def compare_outcomes(a: Outcome, b: Outcome, scenario: Scenario) -> None:
    """``a`` and ``b`` made the same decisions on ``scenario``."""
    where = f"{scenario.name}: {a.engine} vs {b.engine}"
    assert a.rejected == b.rejected, f"{where}: rejections {a.rejected} vs {b.rejected}"
    assert a.finished == b.finished, f"{where}: finish reasons differ"
    assert a.output_tokens == b.output_tokens, f"{where}: output tokens differ"
    if a.batches_comparable and b.batches_comparable:
        for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=False)):
            assert (x, a.preempted[i]) == (y, b.preempted[i]), (
                f"{where}: step {i} differs: {x} preempting {a.preempted[i]}"
                f" vs {y} preempting {b.preempted[i]}"
            )
        assert len(a.steps) == len(b.steps), f"{where}: {len(a.steps)} vs {len(b.steps)} steps"
        assert a.recorder.cached == b.recorder.cached, (
            f"{where}: prefix-cache hits at arrival (engine.cached_tokens) differ:"
            f" {a.recorder.cached} vs {b.recorder.cached}"
        )
    else:
        assert a.admitted == b.admitted, f"{where}: admission order {a.admitted} vs {b.admitted}"
        assert [p for p in a.preempted if p] == [p for p in b.preempted if p], (
            f"{where}: victims differ"
        )


# -------------------------------------------------------------------------
# The simulator's driver
# -------------------------------------------------------------------------


def run_sim(
    scenario: Scenario, policies: Sequence[tuple[str, Policy]], *, late_s: float = 0.0
) -> Outcome:
    """``scenario`` through the simulated engine, one step at a time. ``late_s``: the
    engine view's clock reads that much later than the engine's (every wait looks that
    much longer), as where an engine asks its policies later than the simulator does."""
    from schedkit.sim.engine import SimEngine

    outcome = Outcome("sim")
    facade = facade_of(policies, outcome.recorder)

    class Observed(SimEngine):
        def _execute(self, scheduled: Any, preempted: Any, lane: int = 0) -> None:
            if scheduled or preempted:
                outcome.steps.append({r.request_id: n for r, n in scheduled.items()})
                outcome.preempted.append(sorted(r.request_id for r in preempted))
                for r in scheduled:
                    if r.request_id not in outcome.admitted:
                        outcome.admitted.append(r.request_id)
            super()._execute(scheduled, preempted, lane)

    engine = Observed(  # every step's whole batch: no decode lane
        scenario.requests,
        FixedStep(scenario.step_s),
        scenario.config,
        facade,
        stretch=False,
        lane=False,
    )
    if late_s:
        object.__setattr__(engine.view, "__class__", _late_view(late_s))
    result = engine.run()
    for record in result.records:
        outcome.finished[record.request_id] = record.finish_reason
        outcome.output_tokens[record.request_id] = record.output_tokens
        if record.finish_reason == "rejected":
            outcome.rejected[record.request_id] = record.reject_reason
    outcome.blocks_leaked = scenario.config.num_blocks - engine.kv.num_free
    outcome.policy_errors = result.policy_errors
    return outcome


def shipped_policies() -> list[str]:
    """Every installed policy, built-ins included (what the suite runs by default)."""
    from schedkit.plugins import PolicyRegistry

    return sorted(entry.name for entry in PolicyRegistry.discover().entries())


def _late_view(late_s: float) -> type:
    """The simulator's engine view with its clock ``late_s`` ahead (``run_sim``)."""
    from schedkit.sim.view import SimEngineView

    class LateView(SimEngineView):
        __slots__ = ()

        @property
        def clock(self) -> float:
            return self._engine.clock + late_s

    return LateView
