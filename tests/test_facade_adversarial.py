"""PolicyFacade against hostile policies (issue #12, part 3).

Whatever a policy answers or raises, on every hook: the engine gets a valid decision, in a
container the facade built (never the policy's object) holding only the engine's own
objects; an invalid answer or an exception is counted once in ``facade.errors``; and
nothing but a ``KeyboardInterrupt`` on the main thread leaves the facade (issue #35; and
what a signal handler raises, ``test_hook_budget.py``), not even from an exception or an
answer that cannot be printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from _policies import make_blocks, make_requests, scripted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedkit import (
    Admission,
    BatchBudget,
    BlockState,
    EngineState,
    Policy,
    PolicyFacade,
    ReplicaState,
    RequestState,
    RequestView,
    StepReport,
    hookimpl,
)
from schedkit.answers import UNKEYED
from schedkit.decisions import ADMIT
from schedkit.errors import PolicyDecisionError
from schedkit.facade import MAX_SHOWN
from schedkit.hookspecs import DECISION_HOOKS, HOOK_NAMES, KEY_HOOKS, OBSERVATION_HOOKS
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.workload import load_workload

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEFAULT = BatchBudget(token_budget=2048, max_running=16, prefill_chunk=512)
NUM_BLOCKS = 2  # what select_evictions asks for


@dataclass
class World:
    """Fresh arguments for one call of a hook (the engine's objects)."""

    engine: EngineState
    waiting: list[RequestState]
    running: list[RequestState]
    blocks: list[BlockState]

    @classmethod
    def new(cls) -> World:
        return cls(EngineState(64, 16), make_requests(4), make_requests(5), make_blocks(6))

    def pool(self, hook: str) -> list[Any]:
        """What a list answer of ``hook`` may name."""
        return {"order_waiting": self.waiting, "select_victims": self.running}.get(
            hook, self.blocks
        )


def call(facade: PolicyFacade, hook: str, w: World) -> Any:
    """Drive ``hook`` through its facade method, with fresh argument lists as engines do."""
    if hook == "admit_request":
        return facade.admit(w.waiting[0], w.engine)
    if hook in KEY_HOOKS:  # a key of nothing but UNKEYED: the engine's order stands
        item = w.blocks[0] if hook == "eviction_key" else w.waiting[0]
        key = getattr(facade, hook)(item, w.engine)
        return None if key is None or set(key) == {UNKEYED} else key
    if hook == "on_request_arrived":
        facade.admit(w.waiting[0], w.engine)
        return None
    if hook == "order_waiting":
        return facade.order_waiting(list(w.waiting), w.engine)
    if hook == "plan_batch":
        return facade.plan_batch(w.engine, DEFAULT)
    if hook == "select_victims":
        return facade.select_victims(list(w.running), w.running[0], w.engine)
    if hook == "select_evictions":
        return facade.select_evictions(list(w.blocks), NUM_BLOCKS, w.engine)
    if hook == "route_request":
        return facade.route(w.waiting[0], [ReplicaState(i, w.engine) for i in range(3)])
    if hook == "on_step_finished":
        return facade.step_finished(StepReport(1, 0.01, 0, 1), w.engine)
    return facade.request_finished(w.waiting[0], "stop", w.engine)


ENGINE_DEFAULT: dict[str, Any] = {"admit_request": ADMIT, "plan_batch": DEFAULT}


@contextlib.contextmanager
def warnings_logged() -> Iterator[list[str]]:
    """The facade's warnings while the block runs (caplog is per test, not per example)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger("schedkit"), Collect(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


# -- hostile building blocks -----------------------------------------------------------


class ShapeShifter(list):  # type: ignore[type-arg]
    """Stores one list and shows another: its length and items are ``shown``'s, its first
    iteration too, but later iterations drop the last item; it equals anything.
    ``asked`` counts the calls of its methods."""

    def __init__(self, stored: Sequence[Any], shown: Sequence[Any]) -> None:
        super().__init__(stored)
        self.shown: list[object] = list(shown)
        self.asked = self.iterations = 0

    def __iter__(self) -> Iterator[Any]:
        self.asked += 1
        self.iterations += 1
        return iter(self.shown if self.iterations == 1 else self.shown[:-1])

    def __len__(self) -> int:
        self.asked += 1
        return len(self.shown)

    def __getitem__(self, index: Any) -> Any:
        self.asked += 1
        return self.shown[index]

    def __reversed__(self) -> Iterator[Any]:
        self.asked += 1
        return reversed(self.shown[:-1])

    def __contains__(self, item: object) -> bool:
        self.asked += 1
        return True

    def __eq__(self, other: object) -> bool:
        self.asked += 1
        return True

    __hash__ = None

    def copy(self) -> list[Any]:
        self.asked += 1
        return self.shown[:-1]


class Booby(list):  # type: ignore[type-arg]
    """A list whose every protocol method raises."""

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("no iterating me")

    def __len__(self) -> int:
        raise GeneratorExit("no measuring me")

    def __getitem__(self, index: Any) -> Any:
        raise KeyError(index)

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = None


class Impostor:
    """Looks like ``target``: equal to everything, same hash, same attributes."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash(self._target)


class Unprintable:
    """Every dunder an error message might use raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise GeneratorExit("no str")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


# Hypothesis hashes what sampled_from offers: build these fresh instead.
unprintables = st.builds(Unprintable)


def spoof(claimed: type, **attrs: Any) -> Any:
    """An object whose ``__class__`` claims ``claimed`` (``isinstance`` believes it)."""
    body: dict[str, Any] = {"__class__": property(lambda self: claimed), **attrs}
    return type("Spoofed", (), body)()


class LyingStr(str):
    """A reason whose methods lie or raise; its characters are all that counts."""

    __slots__ = ()

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class ShiftyAdmission(Admission):
    """An Admission whose fields change each time they are read."""

    reads = 0

    def _read(self) -> int:
        object.__setattr__(self, "reads", self.reads + 1)  # frozen, but not to this
        return self.reads

    @property
    def admitted(self) -> bool:
        return self._read() % 2 == 0  # False on the first read

    @property
    def reason(self) -> str:
        return "why" if self._read() % 2 == 0 else ""


class ShiftyBudget(BatchBudget):
    """A BatchBudget whose fields grow each time they are read."""

    reads = 0

    def _next(self) -> int:
        object.__setattr__(self, "reads", self.reads + 1)
        return self.reads if self.reads <= 3 else 10**9

    token_budget = property(_next)
    max_running = property(_next)
    prefill_chunk = property(_next)


def bare(cls: type) -> Any:
    """An instance made without its (slot-writing) ``__init__``."""
    return object.__new__(cls)


class IntSubclass(int):
    def __lt__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return True


# -- list hooks: order_waiting, select_victims, select_evictions ---------------------------

LIST_HOOKS = ("order_waiting", "select_victims", "select_evictions")
STRANGERS: list[Callable[[list[Any]], Any]] = [
    lambda pool: None,
    lambda pool: Impostor(pool[0]),
    lambda pool: Unprintable(),
    lambda pool: make_requests(1)[0],  # a request equal in every field, but not the engine's
    lambda pool: make_blocks(1)[0],
    lambda pool: pool[0].request_id if isinstance(pool[0], RequestState) else 7,
    lambda pool: 10**5000,
    lambda pool: math.nan,
]


def valid(hook: str, stored: list[Any], pool: list[Any]) -> bool:
    """The hook's rule, by identity, written out for the test."""
    ids = [id(x) for x in stored]
    if len(set(ids)) != len(ids) or not set(ids) <= {id(x) for x in pool}:
        return False
    if hook == "order_waiting":
        return len(ids) == len(pool)
    return hook == "select_victims" or len(ids) >= NUM_BLOCKS


@st.composite
def list_answers(draw: st.DrawFn, hook: str, w: World) -> tuple[Any, list[Any] | None]:
    """(answer, what it stores when it is a list, else None)."""
    pool = w.pool(hook)
    member = st.sampled_from(range(len(pool))).map(lambda i: pool[i])
    stranger = st.sampled_from(STRANGERS).map(lambda make: make(pool))
    stored = draw(
        st.one_of(
            st.permutations(pool).map(list),
            st.permutations(pool).flatmap(lambda p: st.integers(0, len(p)).map(lambda n: p[:n])),
            st.lists(st.one_of(member, member, stranger), max_size=2 * len(pool) + 2),
        )
    )
    shown = draw(st.one_of(st.just(stored), st.permutations(pool).map(list)))
    kind = draw(
        st.sampled_from(
            ["list", "shifter", "booby", "tuple", "generator", "spoofed", "dict", "str", "none"]
        )
    )
    if kind == "list":
        return list(stored), list(stored)
    if kind == "shifter":
        return ShapeShifter(stored, shown), list(stored)
    if kind == "booby":
        return Booby(stored), list(stored)
    if kind == "tuple":
        return tuple(stored), None
    if kind == "generator":
        return (x for x in stored), None
    if kind == "spoofed":
        return spoof(list, __iter__=lambda self: iter(shown), __len__=lambda self: len(shown)), None
    if kind == "dict":
        return dict.fromkeys(range(len(stored))), None
    if kind == "str":
        return "r0 r1 r2", None
    return None, None


def assert_engine_result_valid(hook: str, result: Any, pool: list[Any]) -> None:
    if result is None:
        return
    assert type(result) is list
    assert valid(hook, result, pool), result


@pytest.mark.parametrize("hook", LIST_HOOKS)
@PROPERTY
@given(data=st.data())
def test_list_hooks_hand_the_engine_a_valid_copy(hook: str, data: st.DataObject) -> None:
    w = World.new()
    answer, stored = data.draw(list_answers(hook, w))
    facade = PolicyFacade([("p", scripted(**{hook: lambda *args: answer}))])

    result = call(facade, hook, w)

    pool = w.pool(hook)
    assert_engine_result_valid(hook, result, pool)
    if answer is None:
        assert result is None and not facade.errors
    elif stored is not None and valid(hook, stored, pool):
        # What the list stores is what the engine gets; its lying methods are never asked.
        assert result is not answer
        assert [id(x) for x in result] == [id(x) for x in stored]
        assert not facade.errors
        if isinstance(answer, ShapeShifter):
            assert answer.asked == 0
        kept = list(result)
        list.append(answer, make_requests(1)[0])  # the policy changes its answer later
        list.reverse(answer)
        assert [id(x) for x in result] == [id(x) for x in kept]
    else:
        assert result is None
        assert facade.errors == {("p", hook): 1}


@pytest.mark.parametrize("hook", LIST_HOOKS)
@pytest.mark.parametrize("change", ["pop", "append-stranger", "reverse", "clear"])
def test_a_policy_changing_the_list_it_was_given_is_judged_against_the_engines(
    hook: str, change: str
) -> None:
    w = World.new()
    stranger = make_requests(1)[0]

    def answer(given: list[Any], *rest: Any) -> list[Any]:
        if change == "pop":
            given.pop()
        elif change == "append-stranger":
            given.append(stranger)
        elif change == "clear":
            given.clear()
        else:
            given.reverse()
        return given

    facade = PolicyFacade([("p", scripted(**{hook: answer}))])
    pool = w.pool(hook)

    result = call(facade, hook, w)

    assert_engine_result_valid(hook, result, pool)
    if change == "reverse" or (change == "pop" and hook != "order_waiting"):
        assert result is not None and not facade.errors
    elif change == "clear" and hook == "select_victims":
        assert result == [] and not facade.errors  # "no victim of my own" is an answer
    else:
        assert result is None and facade.errors == {("p", hook): 1}


# -- admit_request -----------------------------------------------------------------------

INVALID = "invalid"


def admission_answers() -> st.SearchStrategy[tuple[Any, Any]]:
    """(answer, expected): None, INVALID, or the (admitted, reason) the engine must get."""
    reasons = st.one_of(st.text(min_size=1, max_size=30), st.just("x" * 10_000))
    not_bools: st.SearchStrategy[Any] = st.one_of(
        st.sampled_from([1, 0, None, "yes", 1.0, math.nan, IntSubclass(1)]), unprintables
    )
    not_strs: st.SearchStrategy[Any] = st.one_of(
        st.sampled_from([429, None, b"full", math.inf, ("full",)]), unprintables
    )
    return st.one_of(
        st.just((None, None)),
        st.just((Admission.admit(), (True, ""))),
        st.just((Admission(True), (True, ""))),
        reasons.map(lambda r: (Admission(True, r), (True, r))),
        reasons.map(lambda r: (Admission.reject(r), (False, r))),
        reasons.map(lambda r: (Admission(False, LyingStr(r)), (False, r))),
        st.just((Admission(False, LyingStr("")), INVALID)),
        st.just((Admission.reject(""), INVALID)),
        not_strs.map(lambda r: (Admission(False, r), INVALID)),
        not_strs.map(lambda r: (Admission(True, r), (True, ""))),
        not_bools.map(lambda a: (Admission(a, "why"), INVALID)),
        st.builds(lambda: (bare(ShiftyAdmission), (False, "why"))),  # each field read once
        st.just((spoof(Admission, admitted=False, reason="why"), INVALID)),
        st.one_of(st.sampled_from([True, False, "reject", 0, (ADMIT,)]), unprintables).map(
            lambda a: (a, INVALID)
        ),
    )


@PROPERTY
@given(case=admission_answers())
def test_admission_is_always_an_exact_admission(case: tuple[Any, Any]) -> None:
    answer, expected = case
    facade = PolicyFacade([("p", scripted(admit_request=lambda r, e: answer))])

    result = call(facade, "admit_request", World.new())

    assert type(result) is Admission and type(result.admitted) is bool
    assert type(result.reason) is str
    assert result.admitted or result.reason
    if expected is None:
        assert result is ADMIT and not facade.errors
    elif expected == INVALID:
        assert result is ADMIT and facade.errors == {("p", "admit_request"): 1}
    else:
        assert (result.admitted, result.reason) == expected and not facade.errors
        assert result is ADMIT or result is not answer
        assert result.admitted == result.admitted  # reading again changes nothing
        assert (result.admitted, result.reason) == expected


# -- plan_batch --------------------------------------------------------------------------

FIELDS = ("token_budget", "max_running", "prefill_chunk")
LIMITS: dict[str, int] = {name: getattr(DEFAULT, name) for name in FIELDS}


def budget_value(name: str) -> st.SearchStrategy[Any]:
    limit = LIMITS[name]
    return st.one_of(
        st.integers(-3, limit + 3),
        st.integers(1, limit),
        st.sampled_from([10**20, 10**5000, -(10**5000), 2**63, True, False, None, "8"]),
        st.sampled_from([math.nan, math.inf, -math.inf, 8.0, IntSubclass(8)]),
        unprintables,
    )


def budget_valid(values: dict[str, Any]) -> bool:
    if any(type(v) is not int for v in values.values()):
        return False
    fields: list[int] = [values[n] for n in FIELDS]  # each exactly an int, as checked
    t, m, c = fields
    return (
        1 <= t <= LIMITS["token_budget"]
        and 1 <= m <= LIMITS["max_running"]
        and (1 <= c <= LIMITS["prefill_chunk"])
    )


@st.composite
def budget_answers(draw: st.DrawFn) -> tuple[Any, dict[str, Any] | None]:
    """(answer, the fields the engine must get, or None for the default)."""
    values = {name: draw(budget_value(name)) for name in FIELDS}
    kind = draw(st.sampled_from(["budget", "budget", "spoofed", "shifty", "dict", "tuple"]))
    if kind == "budget":
        return BatchBudget(**values), values if budget_valid(values) else None
    if kind == "shifty":
        return bare(ShiftyBudget), {"token_budget": 1, "max_running": 2, "prefill_chunk": 3}
    if kind == "spoofed":
        return spoof(BatchBudget, **values), None
    if kind == "dict":
        return values, None
    return tuple(values.values()), None


@PROPERTY
@given(case=budget_answers())
def test_budget_is_always_an_exact_budget_within_the_defaults(
    case: tuple[Any, dict[str, Any] | None],
) -> None:
    answer, expected = case
    facade = PolicyFacade([("p", scripted(plan_batch=lambda e, d: answer))])

    result = call(facade, "plan_batch", World.new())

    assert type(result) is BatchBudget
    values = {name: getattr(result, name) for name in FIELDS}
    assert all(type(v) is int for v in values.values())
    assert budget_valid(values)
    if expected is None:
        assert result is DEFAULT and facade.errors == {("p", "plan_batch"): 1}
    else:
        assert values == expected and result is not answer and not facade.errors
    assert BatchBudget(2048, 16, 512) == DEFAULT  # policies got a copy


def test_a_policy_cannot_loosen_the_engines_default_budget() -> None:
    engine_default = BatchBudget(2048, 16, 512)

    def answer(engine: Any, default: BatchBudget) -> BatchBudget:
        object.__setattr__(default, "token_budget", 10**9)  # frozen, but not to setattr
        return default

    facade = PolicyFacade([("p", scripted(plan_batch=answer))])

    assert facade.plan_batch(EngineState(64, 16), engine_default) == BatchBudget(2048, 16, 512)
    assert engine_default == BatchBudget(2048, 16, 512)


# -- exceptions, on every hook -------------------------------------------------------------


class LyingName(type):
    """A metaclass whose classes' ``__name__`` raises."""

    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


BASES: list[type[BaseException]] = [
    Exception,
    RuntimeError,
    StopIteration,
    RecursionError,
    MemoryError,
    BaseException,
    GeneratorExit,
    asyncio.CancelledError,
    PolicyDecisionError,
    SystemExit,
]


def text_method(kind: str) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        if kind == "raises":
            raise ValueError("formatting failed")
        if kind == "raises-base":
            raise GeneratorExit("formatting failed")
        if kind == "not-a-str":
            return 42
        if kind == "lying-str":
            return LyingStr("lying message")
        if kind == "huge":
            return "x" * 1_000_000
        return "" if kind == "empty" else "plain message"

    return method


@st.composite
def hostile_exceptions(draw: st.DrawFn) -> BaseException:
    base = draw(st.sampled_from(BASES))
    kinds = st.sampled_from(
        ["plain", "empty", "raises", "raises-base", "not-a-str", "lying-str", "huge"]
    )
    body = {"__str__": text_method(draw(kinds)), "__repr__": text_method(draw(kinds))}
    meta = LyingName if draw(st.booleans()) else type
    cls = meta("Hostile", (base,), body)
    return cls(Unprintable(), 10**5000)  # type: ignore[no-any-return]


@pytest.mark.parametrize("hook", HOOK_NAMES)
@pytest.mark.parametrize("hard", [False, True], ids=["no-budget", "hard-budget"])
@PROPERTY
@given(exc=hostile_exceptions())
def test_any_exception_is_isolated_and_described_safely(
    hook: str, hard: bool, exc: BaseException
) -> None:
    def answer(*args: Any) -> Any:
        raise exc

    budget: dict[str, Any] = {"hook_budget_ms": 60_000, "hook_budget_hard": True} if hard else {}
    facade = PolicyFacade([("p", scripted(**{hook: answer}))], **budget)

    with warnings_logged() as messages:
        result = call(facade, hook, World.new())

    assert result is ENGINE_DEFAULT.get(hook)
    assert facade.errors == {("p", hook): 1}
    [message] = messages
    described = message.split("raised ", 1)[1].split("; using the next policy")[0]
    assert len(described) <= 2 * MAX_SHOWN + 2  # type name, then the message, each capped


@pytest.mark.parametrize("hook", HOOK_NAMES)
@settings(max_examples=30, deadline=None)
@given(exc=hostile_exceptions())
def test_strict_mode_reports_any_exception_with_a_printable_error(
    hook: str, exc: BaseException
) -> None:
    def answer(*args: Any) -> Any:
        raise exc

    facade = PolicyFacade([("p", scripted(**{hook: answer}))], strict=True)

    with pytest.raises(PolicyDecisionError) as raised:
        call(facade, hook, World.new())
    assert f"policy 'p', hook {hook}: raised " in str(raised.value)
    assert raised.value.__cause__ is exc


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_keyboard_interrupt_propagates(hook: str) -> None:
    def answer(*args: Any) -> Any:
        raise KeyboardInterrupt

    facade = PolicyFacade([("p", scripted(**{hook: answer}))])

    with pytest.raises(KeyboardInterrupt):
        call(facade, hook, World.new())
    assert not facade.errors


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_system_exit_is_isolated(hook: str) -> None:
    def answer(*args: Any) -> Any:
        raise SystemExit(2)

    facade = PolicyFacade([("p", scripted(**{hook: answer}))])

    assert call(facade, hook, World.new()) is ENGINE_DEFAULT.get(hook)
    assert facade.errors == {("p", hook): 1}


def test_system_exit_while_formatting_a_fault_is_isolated() -> None:
    class Exiting(Exception):
        def __str__(self) -> str:
            raise SystemExit

        __repr__ = __str__

    def answer(*args: Any) -> Any:
        raise Exiting

    facade = PolicyFacade([("p", scripted(order_waiting=answer))])
    with warnings_logged() as messages:
        assert call(facade, "order_waiting", World.new()) is None
    assert "raised Exiting: <unprintable Exiting>" in messages[0]


def test_keyboard_interrupt_while_formatting_a_fault_propagates() -> None:
    class Interrupting(Exception):
        def __str__(self) -> str:
            raise KeyboardInterrupt

        __repr__ = __str__

    def answer(*args: Any) -> Any:
        raise Interrupting

    facade = PolicyFacade([("p", scripted(order_waiting=answer))])
    with pytest.raises(KeyboardInterrupt):
        call(facade, "order_waiting", World.new())


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_an_unprintable_invalid_answer_is_counted(hook: str) -> None:
    facade = PolicyFacade([("p", scripted(**{hook: Unprintable()}))])
    with warnings_logged() as messages:
        assert call(facade, hook, World.new()) is ENGINE_DEFAULT.get(hook)
    assert facade.errors == {("p", hook): 1}
    assert "returned Unprintable" in messages[0]


@pytest.mark.parametrize("hook", OBSERVATION_HOOKS)
@pytest.mark.parametrize(
    "answer",
    [ShapeShifter([], [1]), Booby([1]), Unprintable(), 10**5000],
    ids=["shape-shifter", "booby", "unprintable", "huge-int"],
)
def test_what_an_observer_returns_is_ignored(hook: str, answer: Any) -> None:
    facade = PolicyFacade([("p", scripted(**{hook: answer}))])
    assert call(facade, hook, World.new()) is ENGINE_DEFAULT.get(hook)
    assert not facade.errors


# -- end to end: the simulator loses no request ----------------------------------------------


class ShapeShiftingOrder(Policy):
    """Shortest prompt first, answered as a ``ShapeShifter``: its first iteration shows
    the whole queue and later ones drop a request, so an engine iterating the policy's
    object (as ``deque.extend`` does) would lose requests. Every third answer also stores
    one request too few, which only its own storage tells."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = self.short = 0

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        self.calls += 1
        order = sorted(waiting, key=lambda r: r.num_prompt_tokens)
        if self.calls % 3 == 0:
            self.short += 1
            return ShapeShifter(order[:-1], shown=order)
        return ShapeShifter(order, shown=order)


def test_a_shape_shifting_order_loses_no_request_on_the_simulator() -> None:
    requests = load_workload("azure-conv").scaled(3).truncated(500).requests
    cost = LinearCostModel(c0=0.004, c_prefill=2e-5, c_decode=1e-4, c_kv=2e-7, c_attn=1e-9)
    policy = ShapeShiftingOrder()
    facade = PolicyFacade([("shifty", policy)])
    engine = SimEngine(requests, cost, SimConfig(num_blocks=700), facade, check_invariants=True)

    result = engine.run()

    assert len(result.records) == 500
    assert [r.request_id for r in result.records if not r.finish_reason] == []
    assert not engine.waiting and not engine.running
    assert policy.calls > 100 and policy.short > 0
    assert result.policy_errors == policy.short
    assert result.policy_errors_by_hook == {"shifty.order_waiting": policy.short}
