"""Conformance kit for policy authors: does a policy keep the hook contract?

In a plugin's test file::

    from schedkit.testing import conformance_test

    test_conformance = conformance_test("my-policy", {"max_wait_s": 2.0})

or call ``check_policy`` yourself, directly or through the ``schedkit_conformance``
fixture (this module is a pytest plugin, registered by schedkit's ``pytest11`` entry
point)::

    def test_my_policy(schedkit_conformance):
        schedkit_conformance(MyPolicy, {"max_wait_s": 2.0}, max_examples=50)

``check_policy`` generates random, internally consistent engine states with hypothesis and
calls every hook the policy implements through a strict ``PolicyFacade``, up to
``max_examples`` states per hook. The policy conforms when, for every state:

- every decision passes the facade's validation (``order_waiting`` returns a permutation,
  victims are running requests, enough distinct eviction candidates, budgets within the
  defaults, rejections carry a reason) and no hook raises;
- no hook mutates its arguments (the lists, requests, engine, blocks or report);
- two fresh instances with the same options decide the same on equal states (compared by
  request id and block hash), so that seeded runs are reproducible;
- its ``Options`` model rejects unknown fields, so a typo in a config is an error.

It then drives a small engine through a few hundred arrivals, steps, preemptions,
evictions and finishes, twice, with two fresh instances, checking the same properties
and that both runs decide alike: this is what exercises policies that keep counters.

A failure raises ``ConformanceError`` (an ``AssertionError``) naming the policy, the
hook and the state, with the seed that reproduces it (``check_policy(..., seed=N)``).
Needs ``hypothesis`` (``pip install 'schedkit[test]'``), imported only when a check runs.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from schedkit.decisions import FINISH_REASONS, Admission, BatchBudget, StepReport
from schedkit.errors import PluginLoadError, PolicyConfigError, PolicyDecisionError
from schedkit.facade import PolicyFacade
from schedkit.hookspecs import HOOK_NAMES
from schedkit.plugins import PolicyRegistry
from schedkit.policy import Policy, PolicyOptions
from schedkit.views import BlockState, EngineState, RequestState

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn

__all__ = ["ConformanceError", "check_policy", "conformance_test"]

SEQUENCE_ACTIONS = 300
"""Arrivals, steps and aborts in the stateful sequence."""

# hook -> (PolicyFacade method, argument names as in hookspecs)
_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admit_request": ("admit", ("request", "engine")),
    "order_waiting": ("order_waiting", ("waiting", "engine")),
    "plan_batch": ("plan_batch", ("engine", "default")),
    "select_victims": ("select_victims", ("running", "needing", "engine")),
    "select_evictions": ("select_evictions", ("candidates", "num_blocks", "engine")),
    "on_step_finished": ("step_finished", ("report", "engine")),
    "on_request_finished": ("request_finished", ("request", "reason", "engine")),
}
_TENANTS = ("default", "tenant-a", "tenant-b", "tenant-c")


class ConformanceError(AssertionError):
    """A policy broke the hook contract; the message names the policy, hook and state."""


def check_policy(
    policy: str | type[Policy],
    options: Mapping[str, Any] | None = None,
    *,
    max_examples: int = 200,
    seed: int | None = None,
) -> None:
    """Check that ``policy`` (an installed name or a class) keeps the hook contract.

    Raises ``ConformanceError`` on the first violation, ``PolicyConfigError`` when
    ``options`` are invalid for the policy. Without ``seed``, a random one is drawn and
    reported on failure.
    """
    _require_hypothesis()
    subject = _Subject.create(policy, options, random.randrange(2**32) if seed is None else seed)
    hooks = [hook for hook in HOOK_NAMES if hook in subject.facade().implemented]
    for hook in hooks:
        _check_hook(subject, hook, max_examples)
    if hooks:
        _check_sequence(subject)


def conformance_test(
    policy: str | type[Policy],
    options: Mapping[str, Any] | None = None,
    *,
    max_examples: int = 200,
    seed: int | None = None,
) -> Callable[[], None]:
    """A pytest test function running ``check_policy``: ``test_x = conformance_test(...)``."""

    def test_conformance() -> None:
        check_policy(policy, options, max_examples=max_examples, seed=seed)

    name = policy if isinstance(policy, str) else policy.__name__
    test_conformance.__doc__ = f"Policy {name!r} keeps schedkit's hook contract."
    return test_conformance


try:
    import pytest
except ImportError:  # the kit works without pytest; only the fixture needs it
    pass
else:

    @pytest.fixture
    def schedkit_conformance() -> Callable[..., None]:
        """``schedkit.testing.check_policy``, as a fixture."""
        return check_policy


def _require_hypothesis() -> None:
    try:
        import hypothesis  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "schedkit.testing needs hypothesis: pip install 'schedkit[test]'"
            " (or pip install hypothesis)"
        ) from exc


# -------------------------------------------------------------------------
# Calling hooks and judging the answers
# -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Subject:
    """The policy under test: how to make fresh instances, and how to report failures."""

    name: str
    cls: type[Policy]
    options: PolicyOptions
    seed: int

    @classmethod
    def create(
        cls, policy: str | type[Policy], options: Mapping[str, Any] | None, seed: int
    ) -> _Subject:
        if isinstance(policy, str):
            name, policy_cls = policy, PolicyRegistry.discover().load(policy)
        else:
            name, policy_cls = policy.__name__, policy
        model = getattr(policy_cls, "Options", None)
        if not (inspect.isclass(model) and issubclass(model, PolicyOptions)):
            raise ConformanceError(
                f"policy {name!r}: `Options` must subclass schedkit.PolicyOptions"
            )
        try:
            validated = model.model_validate(dict(options or {}))
        except ValidationError as exc:
            raise PolicyConfigError(f"bad options for policy {name!r}: {exc}") from exc
        try:
            model.model_validate({**(options or {}), "schedkit_conformance_unknown": 1})
        except ValidationError:
            pass
        else:
            raise ConformanceError(
                f"policy {name!r}: its Options model accepts unknown fields, so a typo in a"
                " config is silently ignored; keep extra='forbid' (inherited from"
                " schedkit.PolicyOptions)"
            )
        return cls(name, policy_cls, validated, seed)

    def facade(self) -> PolicyFacade:
        try:
            instance = self.cls(self.options)
            return PolicyFacade([(self.name, instance)], strict=True)
        except PluginLoadError as exc:
            raise ConformanceError(f"policy {self.name!r} cannot be registered: {exc}") from exc
        except Exception as exc:
            raise ConformanceError(
                f"policy {self.name!r} cannot be instantiated with {self.options!r}:"
                f" {type(exc).__name__}: {exc}"
            ) from exc

    def fail(self, hook: str, problem: str, args: Sequence[object], where: str = "") -> NoReturn:
        state = _describe(_CALLS[hook][1], args)
        raise ConformanceError(
            f"policy {self.name!r} fails the contract of hook {hook}{where}: {problem}\n"
            f"{state}\nreproduce with check_policy(..., seed={self.seed})"
        )

    def invoke(
        self,
        facade: PolicyFacade,
        hook: str,
        args: tuple[Any, ...],
        shown: Sequence[object] | None = None,
        where: str = "",
    ) -> Any:
        """Call ``hook`` through ``facade``; fail on an invalid answer or a mutated argument."""
        method, names = _CALLS[hook]
        shown = args if shown is None else shown
        before = [_snapshot(arg) for arg in args]
        try:
            result = getattr(facade, method)(*args)
        except PolicyDecisionError as exc:
            problem = str(exc).removeprefix(f"policy {self.name!r}, hook {hook}: ")
            self.fail(hook, problem, shown, where)
        changed = [n for n, b, a in zip(names, before, args, strict=True) if _snapshot(a) != b]
        if changed:
            problem = f"mutated its argument {', '.join(changed)}; hook arguments are read-only"
            self.fail(hook, problem, shown, where)
        return result

    def check_call(self, hook: str, args: tuple[Any, ...]) -> None:
        """One state: valid, non-mutating, and the same answer from two fresh instances."""
        first = self.invoke(self.facade(), hook, copy.deepcopy(args), shown=args)
        second = self.invoke(self.facade(), hook, copy.deepcopy(args), shown=args)
        if _normalize(first) != _normalize(second):
            self.fail(
                hook,
                f"not deterministic: two fresh instances answered {_normalize(first)!r} and"
                f" {_normalize(second)!r} on equal states",
                args,
            )


def _snapshot(value: object) -> object:
    """A comparable copy of everything a hook argument holds."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_snapshot(item) for item in value))
    if isinstance(value, RequestState | EngineState | BlockState):
        return (type(value).__name__, tuple(getattr(value, s) for s in value.__slots__))
    if isinstance(value, StepReport):
        return tuple(_snapshot(getattr(value, f.name)) for f in dataclasses.fields(value))
    return value


def _normalize(result: object) -> object:
    """A decision in terms that compare across two equal states: ids, not objects."""
    if isinstance(result, list):
        return tuple(_identity(item) for item in result)
    if isinstance(result, Admission):
        return "admit" if result.admitted else ("reject", result.reason)
    return result


def _identity(item: object) -> object:
    if isinstance(item, BlockState):
        return item.block_hash
    return getattr(item, "request_id", item)


def _describe(names: Sequence[str], args: Sequence[object]) -> str:
    return "\n".join(f"  {name} = {_format(arg)}" for name, arg in zip(names, args, strict=True))


def _format(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + "".join(f"\n      {_format(item)}," for item in value) + "\n    ]"
    if isinstance(value, RequestState | EngineState | BlockState):
        names = sorted(value.__slots__, key=lambda s: s != "request_id")  # the id first
        fields = ", ".join(f"{s}={getattr(value, s)!r}" for s in names)
        return f"{type(value).__name__}({fields})"
    if isinstance(value, StepReport):
        fields = ", ".join(
            f"{f.name}={_format(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"StepReport({fields})"
    return repr(value)


# -------------------------------------------------------------------------
# Random states, one hook at a time (hypothesis)
# -------------------------------------------------------------------------


def _check_hook(subject: _Subject, hook: str, max_examples: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    @seeded(subject.seed)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,  # the seed alone reproduces a run
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(st.composite(_ARGS[hook])())
    def run(args: tuple[Any, ...]) -> None:
        subject.check_call(hook, args)

    try:
        run()
    except Flaky as exc:
        inner = [e for e in getattr(exc, "exceptions", ()) if isinstance(e, ConformanceError)]
        detail = (
            f"\n{inner[0]}" if inner else f"\nreproduce with check_policy(..., seed={subject.seed})"
        )
        raise ConformanceError(
            f"policy {subject.name!r} fails the contract of hook {hook}: not deterministic:"
            " it failed on a state, then passed when the same state was replayed, so its"
            " answers depend on something besides its arguments and options (wall time,"
            f" global random state, ...){detail}"
        ) from exc


def _draw_clock(draw: DrawFn) -> float:
    from hypothesis import strategies as st

    return draw(st.floats(0.0, 100_000.0, allow_nan=False, allow_infinity=False))


def _draw_time(draw: DrawFn, clock: float) -> float:
    from hypothesis import strategies as st

    # sixteenths of the clock, so equal times (ties) are common
    return clock * draw(st.integers(0, 16)) / 16


def _draw_request(draw: DrawFn, request_id: str, clock: float, phase: str) -> RequestState:
    """A request that is "new", "waiting", "running", or finished by "stop" or "length"."""
    from hypothesis import strategies as st

    prompt = draw(st.integers(1, 8192))
    max_tokens = draw(st.integers(2 if phase == "running" else 1, 2048))
    request = RequestState(
        request_id,
        prompt,
        max_tokens,
        arrival_time=_draw_time(draw, clock),
        tenant=draw(st.sampled_from(_TENANTS)),
        priority=draw(st.integers(-3, 3)),
        slo_ttft_ms=draw(st.none() | st.floats(1.0, 60_000.0)),
        slo_tpot_ms=draw(st.none() | st.floats(1.0, 1_000.0)),
    )
    if phase == "new":
        return request
    request.num_preemptions = draw(st.integers(0, 3))
    if phase == "waiting":
        if request.num_preemptions:  # recompute preemption keeps the output, drops the KV
            request.num_cached_tokens = draw(st.integers(0, prompt - 1))
            request.num_output_tokens = draw(st.integers(0, max_tokens - 1))
        return request
    if phase == "running":  # computed < prompt: prefilling; else decoding
        request.num_computed_tokens = draw(st.integers(1, prompt + max_tokens - 2))
        request.num_output_tokens = max(0, request.num_computed_tokens - prompt + 1)
    else:
        output = max_tokens if phase == "length" else draw(st.integers(1, max_tokens))
        request.num_output_tokens = output
        request.num_computed_tokens = prompt + output - 1
    request.num_cached_tokens = draw(st.integers(0, min(request.num_computed_tokens, prompt) - 1))
    return request


def _draw_requests(
    draw: DrawFn, prefix: str, clock: float, phase: str, min_size: int, max_size: int
) -> list[RequestState]:
    from hypothesis import strategies as st

    size = draw(st.integers(min_size, max_size))
    return [_draw_request(draw, f"{prefix}{i}", clock, phase) for i in range(size)]


def _draw_engine(
    draw: DrawFn,
    clock: float,
    running: Sequence[RequestState],
    num_waiting: int,
    free: int | None = None,
) -> EngineState:
    from hypothesis import strategies as st

    block_size = draw(st.sampled_from((1, 16, 32)))
    used = sum(math.ceil(r.num_computed_tokens / block_size) for r in running)
    free = draw(st.integers(0, 4096)) if free is None else free
    engine = EngineState(max(used + free, 1), block_size)
    engine.kv_blocks_free = engine.kv_blocks_total - used
    engine.clock = clock
    engine.num_running = len(running)
    engine.num_waiting = num_waiting
    engine.step_index = draw(st.integers(0, 1_000_000))
    return engine


def _admit_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    request = _draw_request(draw, "new", clock, "new")
    request.arrival_time = clock
    return (request, _draw_engine(draw, clock, running, draw(st.integers(0, 64))))


def _order_args(draw: DrawFn) -> tuple[Any, ...]:
    clock = _draw_clock(draw)
    waiting = _draw_requests(draw, "w", clock, "waiting", 1, 24)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    return (waiting, _draw_engine(draw, clock, running, len(waiting)))


def _plan_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 64)))
    token_budget = draw(st.integers(1, 65_536))
    chunk = draw(st.just(0) | st.integers(1, token_budget))
    return (engine, BatchBudget(token_budget, draw(st.integers(1, 1024)), chunk))


def _victims_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 1, 16)
    needing = running[draw(st.integers(0, len(running) - 1))]
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 16)), draw(st.integers(0, 2)))
    return (running, needing, engine)


def _evictions_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    hashes = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=24, unique=True))
    blocks = []
    for block_hash in hashes:
        block = BlockState(block_hash, draw(st.integers(0, 63)), _draw_time(draw, clock))
        block.num_hits = draw(st.integers(0, 50))
        blocks.append(block)
    blocks.sort(key=lambda b: b.last_access)  # least recently used first
    running = _draw_requests(draw, "r", clock, "running", 0, 4)
    # called when no never-cached block is left: the free blocks are the candidates
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 16)), len(blocks))
    return (blocks, draw(st.integers(1, len(blocks))), engine)


def _step_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 12)
    waiting = _draw_requests(draw, "w", clock, "waiting", 0, 8)
    num_steps = draw(st.integers(1, 8))  # > 1 only for a run of decode steps
    eligible = [r for r in running if num_steps == 1 or r.num_output_tokens >= num_steps]
    mask = draw(st.lists(st.booleans(), min_size=len(eligible), max_size=len(eligible)))
    scheduled = [r for r, keep in zip(eligible, mask, strict=True) if keep]
    tokens = [
        num_steps if r.num_output_tokens else draw(st.integers(1, r.num_computed_tokens))
        for r in scheduled
    ]
    decode = sum(n for r, n in zip(scheduled, tokens, strict=True) if r.num_output_tokens)
    report = StepReport(
        num_steps=num_steps,
        duration_s=draw(st.floats(1e-4, 10.0)),
        num_prefill_tokens=sum(tokens) - decode,
        num_decode_tokens=decode,
        scheduled=tuple(scheduled),
        num_scheduled_tokens=tuple(tokens),
        preempted=tuple(r for r in waiting if r.num_preemptions and draw(st.booleans())),
    )
    return (report, _draw_engine(draw, clock, running, len(waiting)))


def _finished_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    reason = draw(st.sampled_from(FINISH_REASONS))
    phase = {"rejected": "new", "stop": "stop", "length": "length"}.get(reason)
    phase = phase or draw(st.sampled_from(("waiting", "running")))
    request = _draw_request(draw, "done", clock, phase)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    return (request, reason, _draw_engine(draw, clock, running, draw(st.integers(0, 16))))


_ARGS: dict[str, Callable[[DrawFn], tuple[Any, ...]]] = {
    "admit_request": _admit_args,
    "order_waiting": _order_args,
    "plan_batch": _plan_args,
    "select_victims": _victims_args,
    "select_evictions": _evictions_args,
    "on_step_finished": _step_args,
    "on_request_finished": _finished_args,
}


# -------------------------------------------------------------------------
# A stateful sequence on a small engine
# -------------------------------------------------------------------------


def _check_sequence(subject: _Subject) -> None:
    first = _MiniEngine(subject, subject.seed).run(SEQUENCE_ACTIONS)
    second = _MiniEngine(subject, subject.seed).run(SEQUENCE_ACTIONS)
    for a, b in zip(first, second, strict=False):
        if a != b:
            raise ConformanceError(
                f"policy {subject.name!r} is not deterministic: in the stateful sequence,"
                f" action {a[0]}, hook {a[1]}, two fresh instances answered {a[2]!r} and"
                f" {b[2]!r} after identical histories\n"
                f"reproduce with check_policy(..., seed={subject.seed})"
            )


class _MiniEngine:
    """Plausible state transitions between hook calls; no cost model, no timing."""

    def __init__(self, subject: _Subject, seed: int) -> None:
        self.subject = subject
        self.facade = subject.facade()
        self.rng = random.Random(seed)
        self.engine = EngineState(self.rng.choice((16, 32, 64)), block_size=16)
        self.default = BatchBudget(
            self.rng.choice((64, 256, 2048)), self.rng.choice((4, 16, 64)), self.rng.choice((0, 48))
        )
        self.waiting: list[RequestState] = []
        self.running: list[RequestState] = []
        self.cached: list[BlockState] = []  # free but holding a prefix, LRU first
        self.held: dict[str, int] = {}  # blocks per running request
        self.trace: list[tuple[int, str, object]] = []
        self.action = 0
        self.created = 0
        self.next_hash = 0

    def run(self, actions: int) -> list[tuple[int, str, object]]:
        for action in range(actions):
            self.action = action
            roll = self.rng.random()
            if roll < 0.3:
                self.arrive()
            elif roll < 0.92:
                self.step()
            else:
                self.abort()
        return self.trace

    def call(self, hook: str, *args: Any) -> Any:
        self.engine.num_running = len(self.running)
        self.engine.num_waiting = len(self.waiting)
        where = f" (stateful sequence, action {self.action})"
        result = self.subject.invoke(self.facade, hook, args, where=where)
        self.trace.append((self.action, hook, _normalize(result)))
        return result

    def arrive(self) -> None:
        rng, engine = self.rng, self.engine
        engine.clock += rng.choice((0.0, 0.01, 0.1))  # 0.0: simultaneous arrivals
        request = RequestState(
            f"req-{self.created}",
            rng.randint(1, 120),  # at most 15 blocks with the output: fits the smallest KV
            rng.randint(1, 120),
            arrival_time=engine.clock,
            tenant=rng.choice(_TENANTS),
            priority=rng.randint(0, 3),
            slo_ttft_ms=rng.choice((None, 500.0, 2000.0)),
            slo_tpot_ms=rng.choice((None, 50.0)),
        )
        self.created += 1
        if self.call("admit_request", request, engine).admitted:
            self.waiting.append(request)
        else:
            self.call("on_request_finished", request, "rejected", engine)

    def step(self) -> None:
        engine = self.engine
        engine.clock += self.rng.choice((0.005, 0.02, 0.05))
        budget: BatchBudget = self.call("plan_batch", engine, self.default)
        if self.waiting:
            order = self.call("order_waiting", self.waiting, engine)
            if order is not None:
                self.waiting[:] = order
        tokens = budget.token_budget
        scheduled: list[tuple[RequestState, int, bool]] = []
        preempted: list[RequestState] = []
        for request in list(self.running):
            if tokens <= 0:
                break
            if request not in self.running:  # preempted for another one
                continue
            n, decoding = self.chunk(request, tokens, budget)
            if self.make_room(request, n, preempted):
                scheduled.append((request, n, decoding))
                tokens -= n
        while not preempted and self.waiting and tokens > 0:
            if len(self.running) >= budget.max_running:
                break
            request = self.waiting[0]
            n, decoding = self.chunk(request, tokens, budget)
            blocks = math.ceil((request.num_computed_tokens + n) / 16)
            if not self.allocate(blocks):
                break
            self.running.append(self.waiting.pop(0))
            self.held[request.request_id] = blocks
            scheduled.append((request, n, decoding))
            tokens -= n
            if self.cached and self.rng.random() < 0.3:  # a prefix-cache hit
                block = self.cached.pop(self.rng.randrange(len(self.cached)))
                block.num_hits += 1
                block.last_access = engine.clock
                self.cached.append(block)
        for request, n, _ in scheduled:
            request.num_computed_tokens += n
            if request.num_computed_tokens == request.num_prompt_tokens + request.num_output_tokens:
                request.num_output_tokens += 1  # the step samples a token
        engine.step_index += 1
        decode = sum(n for _, n, decoding in scheduled if decoding)
        report = StepReport(
            num_steps=1,
            duration_s=0.01,
            num_prefill_tokens=sum(n for _, n, _ in scheduled) - decode,
            num_decode_tokens=decode,
            scheduled=tuple(r for r, _, _ in scheduled),
            num_scheduled_tokens=tuple(n for _, n, _ in scheduled),
            preempted=tuple(preempted),
        )
        self.call("on_step_finished", report, engine)
        for request in list(self.running):
            if request.num_output_tokens >= request.max_tokens:
                self.finish(request, "length")
            elif request.num_output_tokens and self.rng.random() < 0.02:
                self.finish(request, "stop")

    def chunk(self, request: RequestState, tokens: int, budget: BatchBudget) -> tuple[int, bool]:
        """Tokens to compute this step (the rest of the prompt and output so far), decoding?"""
        left = request.num_prompt_tokens + request.num_output_tokens - request.num_computed_tokens
        decoding = left == 1 and request.num_output_tokens > 0
        if not decoding and budget.prefill_chunk:
            left = min(left, budget.prefill_chunk)
        return min(left, tokens), decoding

    def make_room(self, request: RequestState, n: int, preempted: list[RequestState]) -> bool:
        blocks = math.ceil((request.num_computed_tokens + n) / 16) - self.held[request.request_id]
        if not self.allocate(blocks):
            victims = self.call("select_victims", self.running, request, self.engine)
            # the policy's victims in order, then the default: last admitted first
            for victim in [*(victims or []), *reversed(self.running)]:
                if victim not in self.running:
                    continue
                self.release(victim)
                victim.num_computed_tokens = 0
                victim.num_preemptions += 1
                self.waiting.insert(0, victim)
                preempted.append(victim)
                if victim is request:
                    return False
                if self.allocate(blocks):
                    break
            else:
                return False
        self.held[request.request_id] += blocks
        return True

    def allocate(self, blocks: int) -> bool:
        engine = self.engine
        if blocks > engine.kv_blocks_free:
            return False
        fresh = engine.kv_blocks_free - len(self.cached)
        if blocks > fresh:
            engine.kv_blocks_free -= fresh  # never-cached blocks go first
            needed = blocks - fresh
            chosen = self.call("select_evictions", self.cached, needed, engine)
            for block in (chosen if chosen is not None else list(self.cached))[:needed]:
                self.cached.remove(block)
            blocks = needed
        engine.kv_blocks_free -= blocks
        return True

    def release(self, request: RequestState) -> int:
        self.running.remove(request)
        freed = self.held.pop(request.request_id)
        self.engine.kv_blocks_free += freed
        return freed

    def finish(self, request: RequestState, reason: str) -> None:
        freed = self.release(request)
        for depth in range(min(freed, request.num_prompt_tokens // 16)):
            self.next_hash += 1
            self.cached.append(BlockState(self.next_hash, depth, self.engine.clock))
        self.call("on_request_finished", request, reason, self.engine)

    def abort(self) -> None:
        pool = self.waiting + self.running
        if not pool:
            return
        request = pool[self.rng.randrange(len(pool))]
        if request in self.running:
            self.release(request)
        else:
            self.waiting.remove(request)
        self.call("on_request_finished", request, "aborted", self.engine)
