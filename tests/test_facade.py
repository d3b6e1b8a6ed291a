"""PolicyFacade: composition order, fault isolation, validation, zero-cost hooks."""

from __future__ import annotations

import math
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy
import pytest
from _policies import Scripted, make_blocks, make_requests, raising, scripted

from schedkit import (
    Admission,
    BatchBudget,
    BlockState,
    EngineState,
    Policy,
    PolicyFacade,
    ReplicaState,
    RequestState,
    StepReport,
    hookimpl,
)
from schedkit.answers import UNKEYED
from schedkit.decisions import ADMIT
from schedkit.errors import PluginLoadError, PolicyConfigError, PolicyDecisionError
from schedkit.hookspecs import DECISION_HOOKS, HOOK_NAMES, KEY_HOOKS, OBSERVATION_HOOKS

DEFAULT = BatchBudget(token_budget=2048, max_running=16, prefill_chunk=512)


@dataclass
class World:
    """Arguments for one call of every hook."""

    engine: EngineState
    waiting: list[RequestState]
    running: list[RequestState]
    blocks: list[BlockState]
    num_blocks: int = 2
    report: StepReport = field(default_factory=lambda: StepReport(1, 0.01, 0, 1))
    replicas: list[ReplicaState] = field(default_factory=list)


@pytest.fixture
def world(engine: EngineState) -> World:
    return World(
        engine=engine, waiting=make_requests(4), running=make_requests(4), blocks=make_blocks(6),
        replicas=[ReplicaState(i, engine) for i in range(4)],
    )  # fmt: skip


def call(facade: PolicyFacade, hook: str, w: World) -> Any:
    """Drive ``hook`` through its facade method."""
    if hook == "admit_request":
        return facade.admit(w.waiting[0], w.engine)
    if hook == "order_waiting":
        return facade.order_waiting(w.waiting, w.engine)
    if hook == "plan_batch":
        return facade.plan_batch(w.engine, DEFAULT)
    if hook == "select_victims":
        return facade.select_victims(w.running, w.running[0], w.engine)
    if hook == "select_evictions":
        return facade.select_evictions(w.blocks, w.num_blocks, w.engine)
    if hook == "route_request":
        return facade.route(w.waiting[0], w.replicas)
    if hook in KEY_HOOKS:  # a key of nothing but UNKEYED: the engine's order stands
        item = w.blocks[0] if hook == "eviction_key" else w.waiting[0]
        key = getattr(facade, hook)(item, w.engine)
        return None if key is None or set(key) == {UNKEYED} else key
    if hook == "on_request_arrived":
        facade.admit(w.waiting[0], w.engine)
        return None
    if hook == "on_step_finished":
        return facade.step_finished(w.report, w.engine)
    return facade.request_finished(w.waiting[0], "stop", w.engine)


ENGINE_DEFAULT: dict[str, Any] = {
    "admit_request": ADMIT,
    "order_waiting": None,
    "plan_batch": DEFAULT,
    "select_victims": None,
    "select_evictions": None,
    "route_request": None,
}

# Two different valid answers per decision hook, to tell which policy decided.
FIRST: dict[str, Callable[..., Any]] = {
    "admit_request": lambda r, e: Admission.reject("first"),
    "order_waiting": lambda w, e: list(w[::-1]),
    "plan_batch": lambda e, d: BatchBudget(100, 1, 1),
    "select_victims": lambda r, n, e: [r[1]],
    "select_evictions": lambda c, n, e: list(c[:n]),
    "route_request": lambda r, replicas: 1,
}
SECOND: dict[str, Callable[..., Any]] = {
    "admit_request": lambda r, e: Admission.reject("second"),
    "order_waiting": lambda w, e: [*w[1:], w[0]],
    "plan_batch": lambda e, d: BatchBudget(200, 2, 2),
    "select_victims": lambda r, n, e: [r[2], r[3]],
    "select_evictions": lambda c, n, e: list(c[-n:]),
    "route_request": lambda r, replicas: 2,
}
INVALID: dict[str, Callable[..., Any]] = {
    "admit_request": lambda r, e: "admit",
    "order_waiting": lambda w, e: list(w[1:]),
    "plan_batch": lambda e, d: BatchBudget(d.token_budget + 1, 1),
    "select_victims": lambda r, n, e: [r[0], r[0]],
    "select_evictions": lambda c, n, e: list(c[: n - 1]),
    "route_request": lambda r, replicas: len(replicas),
}


def answered(policy: Scripted, hook: str) -> Any:
    """What ``policy`` answered at its (only) call of ``hook``."""
    [args] = policy.calls_to(hook)
    return policy.answers[hook](*args)


def warnings_about(caplog: pytest.LogCaptureFixture, policy: str, hook: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "schedkit" and f"policy {policy!r}, hook {hook}:" in r.getMessage()
    ]


# -- composition ------------------------------------------------------------------------


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_first_configured_policy_is_consulted_first(hook: str, world: World) -> None:
    a, b = scripted(**{hook: FIRST[hook]}), scripted(**{hook: SECOND[hook]})

    result = call(PolicyFacade([("a", a), ("b", b)]), hook, world)

    assert result == answered(a, hook)
    assert b.calls == []  # first non-None result stops the search


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_configured_order_not_registration_order_decides(hook: str, world: World) -> None:
    a, b = scripted(**{hook: FIRST[hook]}), scripted(**{hook: SECOND[hook]})

    result = call(PolicyFacade([("b", b), ("a", a)]), hook, world)

    assert result == answered(b, hook)
    assert a.calls == []


@pytest.mark.parametrize("hook", DECISION_HOOKS)
@pytest.mark.parametrize("mark", ["tryfirst", "trylast"])
def test_hookimpl_marks_cannot_change_the_configured_order(
    hook: str, mark: str, world: World
) -> None:
    # pluggy would call a tryfirst implementation first (trylast last) whatever the
    # registration order; schedkit's configuration alone decides.
    first, second = scripted(**{hook: FIRST[hook]}), scripted(**{hook: SECOND[hook]})
    marked = second if mark == "tryfirst" else first
    plain = getattr(type(marked), hook)
    # A copy of the function, so the mark does not leak to other Scripted classes.
    impl = types.FunctionType(plain.__code__, plain.__globals__, plain.__name__)
    marker = hookimpl(tryfirst=mark == "tryfirst", trylast=mark == "trylast")
    setattr(type(marked), hook, marker(impl))

    facade = PolicyFacade([("a", first), ("b", second)])
    result = call(facade, hook, world)

    assert result == answered(first, hook)
    assert second.calls == []


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_none_falls_through_to_the_next_policy(hook: str, world: World) -> None:
    a, b = scripted(**{hook: None}), scripted(**{hook: SECOND[hook]})

    result = call(PolicyFacade([("a", a), ("b", b)]), hook, world)

    assert result == answered(b, hook)
    assert len(a.calls) == 1


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_invalid_answer_from_first_falls_through_to_second(hook: str, world: World) -> None:
    a, b = scripted(**{hook: INVALID[hook]}), scripted(**{hook: SECOND[hook]})
    facade = PolicyFacade([("a", a), ("b", b)])

    result = call(facade, hook, world)

    assert result == answered(b, hook)
    assert facade.errors == {("a", hook): 1}


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_all_none_gives_the_engine_default(hook: str, world: World) -> None:
    a, b = scripted(**{hook: None}), scripted(**{hook: None})
    facade = PolicyFacade([("a", a), ("b", b)])

    assert call(facade, hook, world) == ENGINE_DEFAULT[hook]
    assert len(a.calls) == len(b.calls) == 1
    assert not facade.errors


def test_one_policy_per_hook_composes(world: World) -> None:
    order = scripted(order_waiting=FIRST["order_waiting"])
    admit = scripted(admit_request=FIRST["admit_request"])
    facade = PolicyFacade([("order", order), ("admit", admit)])

    assert facade.label == "order+admit"
    assert facade.implemented == {"order_waiting", "admit_request"}
    assert call(facade, "order_waiting", world) == world.waiting[::-1]
    assert call(facade, "admit_request", world).reason == "first"


# -- fault isolation --------------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_raising_policy_is_counted_logged_once_and_skipped(
    hook: str, world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    facade = PolicyFacade([("broken", scripted(**{hook: raising(RuntimeError("kaboom"))}))])

    results = [call(facade, hook, world) for _ in range(25)]

    assert results == [ENGINE_DEFAULT.get(hook)] * 25
    assert facade.errors == {("broken", hook): 25}
    assert facade.error_count == 25
    [message] = warnings_about(warnings_log, "broken", hook)
    assert "RuntimeError: kaboom" in message


def test_logged_once_per_policy_and_hook(
    world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    boom = raising(ValueError("no"))
    facade = PolicyFacade(
        [
            ("p", scripted(admit_request=boom, order_waiting=boom)),
            ("q", scripted(admit_request=boom, order_waiting=INVALID["order_waiting"])),
        ]
    )

    for _ in range(10):
        call(facade, "admit_request", world)
        call(facade, "order_waiting", world)

    assert facade.errors == Counter(
        {
            ("p", "admit_request"): 10,
            ("p", "order_waiting"): 10,
            ("q", "admit_request"): 10,
            ("q", "order_waiting"): 10,
        }
    )
    assert len([r for r in warnings_log.records if r.name == "schedkit"]) == 4
    for policy in ("p", "q"):
        for hook in ("admit_request", "order_waiting"):
            assert len(warnings_about(warnings_log, policy, hook)) == 1


def test_raising_first_policy_falls_through_to_second(world: World) -> None:
    b = scripted(order_waiting=SECOND["order_waiting"])
    facade = PolicyFacade([("a", scripted(order_waiting=raising(KeyError("x")))), ("b", b)])
    assert call(facade, "order_waiting", world) == answered(b, "order_waiting")
    assert facade.errors == {("a", "order_waiting"): 1}


# -- validation -------------------------------------------------------------------------

W = make_requests(3)  # a waiting queue the rules below refer to
STRANGER = make_requests(1)[0]
B = make_blocks(4)


@dataclass(frozen=True)
class Rule:
    hook: str
    answer: Any
    problem: str  # part of the logged message


RULES = {
    # order_waiting: a permutation of the waiting queue, as a list
    "order-dropped": Rule("order_waiting", W[:2], "returned 2 requests for a waiting queue of 3"),
    "order-duplicated": Rule("order_waiting", [W[0], W[0], W[1]], "not return a permutation"),
    "order-foreign": Rule("order_waiting", [W[0], W[1], STRANGER], "not return a permutation"),
    "order-tuple": Rule("order_waiting", tuple(W), "returned tuple"),
    "order-copies": Rule("order_waiting", make_requests(3), "not return a permutation"),
    # select_victims: distinct running requests
    "victim-not-running": Rule("select_victims", [STRANGER], "not a running request"),
    "victim-duplicate": Rule("select_victims", [W[1], W[1]], "same running request twice"),
    "victim-not-a-list": Rule("select_victims", W[1], "returned RequestState"),
    # select_evictions: at least num_blocks distinct candidates
    "eviction-not-candidate": Rule(
        "select_evictions", [B[0], make_blocks(1)[0]], "not a evictable"
    ),
    "eviction-too-few": Rule("select_evictions", [B[0]], "at least 2 needed"),
    "eviction-duplicate": Rule("select_evictions", [B[0], B[0]], "same evictable block twice"),
    "eviction-set": Rule("select_evictions", set(B), "returned set"),
    # admit_request: an Admission; a rejection has a reason
    "admission-no-reason": Rule("admit_request", Admission(admitted=False), "without a reason"),
    "admission-blank-reason": Rule("admit_request", Admission.reject(""), "without a reason"),
    "admission-reason-not-str": Rule("admit_request", Admission(False, 429), "without a reason"),  # type: ignore[arg-type]
    "admission-bool": Rule("admit_request", True, "returned bool"),
    "admission-str": Rule("admit_request", "reject", "returned str"),
    # plan_batch: a BatchBudget within 1..default (prefill_chunk: 1..cap when capped)
    "budget-dict": Rule("plan_batch", {"token_budget": 1}, "returned dict"),
    "budget-token-zero": Rule(
        "plan_batch", BatchBudget(0, 16, 512), "token_budget 0 outside 1..2048"
    ),
    "budget-token-over": Rule(
        "plan_batch", BatchBudget(2049, 16, 512), "token_budget 2049 outside"
    ),
    "budget-running-zero": Rule(
        "plan_batch", BatchBudget(2048, 0, 512), "max_running 0 outside 1..16"
    ),
    "budget-running-over": Rule("plan_batch", BatchBudget(2048, 17, 512), "max_running 17 outside"),
    "budget-chunk-over": Rule(
        "plan_batch", BatchBudget(2048, 16, 513), "prefill_chunk 513 outside 1..512"
    ),
    "budget-chunk-uncapped": Rule(
        "plan_batch", BatchBudget(2048, 16, 0), "prefill_chunk 0 outside 1..512"
    ),
    "budget-chunk-negative": Rule(
        "plan_batch", BatchBudget(2048, 16, -1), "prefill_chunk -1 outside"
    ),
}


def call_with_rule_world(facade: PolicyFacade, hook: str, engine: EngineState) -> Any:
    w = World(engine=engine, waiting=W, running=W, blocks=B, num_blocks=2)
    return call(facade, hook, w)


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_invalid_decision_is_refused(
    rule: Rule, engine: EngineState, warnings_log: pytest.LogCaptureFixture
) -> None:
    facade = PolicyFacade([("bad", scripted(**{rule.hook: rule.answer}))])

    assert call_with_rule_world(facade, rule.hook, engine) == ENGINE_DEFAULT[rule.hook]

    assert facade.errors == {("bad", rule.hook): 1}
    [message] = warnings_about(warnings_log, "bad", rule.hook)
    assert rule.problem in message


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_strict_mode_raises_on_invalid_decision(rule: Rule, engine: EngineState) -> None:
    facade = PolicyFacade([("bad", scripted(**{rule.hook: rule.answer}))], strict=True)

    with pytest.raises(PolicyDecisionError, match=rf"policy 'bad', hook {rule.hook}: "):
        call_with_rule_world(facade, rule.hook, engine)
    assert facade.errors == {("bad", rule.hook): 1}


@pytest.mark.parametrize(
    ("default", "budget"),
    [
        (DEFAULT, BatchBudget(1, 1, 1)),
        (DEFAULT, BatchBudget(2048, 16, 512)),
        (BatchBudget(2048, 16, 0), BatchBudget(2048, 16, 0)),  # uncapped stays uncapped
        (BatchBudget(2048, 16, 0), BatchBudget(2048, 16, 64)),  # a cap where none was
        (BatchBudget(2048, 16, 0), BatchBudget(2048, 16, 100_000)),
    ],
)
def test_valid_budgets_are_accepted(
    default: BatchBudget, budget: BatchBudget, engine: EngineState
) -> None:
    facade = PolicyFacade([("ok", scripted(plan_batch=budget))], strict=True)
    planned = facade.plan_batch(engine, default)
    assert planned == budget
    assert planned is not budget  # the engine gets the facade's copy, never the policy's


def test_negative_prefill_chunk_refused_when_default_is_uncapped(engine: EngineState) -> None:
    uncapped = BatchBudget(2048, 16, 0)
    facade = PolicyFacade([("bad", scripted(plan_batch=BatchBudget(2048, 16, -5)))])
    assert facade.plan_batch(engine, uncapped) is uncapped
    assert facade.errors == {("bad", "plan_batch"): 1}


@pytest.mark.parametrize(
    "budget",
    [
        pytest.param(
            BatchBudget("2048", 16, 512),  # type: ignore[arg-type]
            id="str-token-budget",
        ),
        pytest.param(
            BatchBudget(2048, 2.5, 512),  # type: ignore[arg-type]
            id="float-max-running",
        ),
    ],
)
def test_budget_fields_of_the_wrong_type_are_refused(
    budget: BatchBudget, engine: EngineState
) -> None:
    facade = PolicyFacade([("bad", scripted(plan_batch=budget))])
    assert facade.plan_batch(engine, DEFAULT) is DEFAULT
    assert facade.errors == {("bad", "plan_batch"): 1}


def test_empty_victim_list_is_a_valid_answer(world: World) -> None:
    facade = PolicyFacade([("none", scripted(select_victims=[]))], strict=True)
    assert call(facade, "select_victims", world) == []


def test_strict_mode_raises_when_a_policy_raises(world: World) -> None:
    b = scripted(admit_request=FIRST["admit_request"])
    facade = PolicyFacade(
        [("broken", scripted(admit_request=raising(RuntimeError("x")))), ("b", b)], strict=True
    )
    with pytest.raises(
        PolicyDecisionError, match=r"policy 'broken', hook admit_request: raised RuntimeError"
    ):
        call(facade, "admit_request", world)
    assert b.calls == []


def test_strict_mode_raises_for_observers(world: World) -> None:
    facade = PolicyFacade(
        [("obs", scripted(on_step_finished=raising(OSError("disk"))))], strict=True
    )
    with pytest.raises(PolicyDecisionError, match="on_step_finished"):
        call(facade, "on_step_finished", world)


# -- what the engine receives ------------------------------------------------------------


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_the_engine_gets_the_facades_copy_never_the_policys_object(hook: str, world: World) -> None:
    policy = scripted(**{hook: FIRST[hook]})
    facade = PolicyFacade([("p", policy)], strict=True)

    result = call(facade, hook, world)

    answer = answered(policy, hook)
    assert result == answer
    assert type(result) is type(answer)
    if hook != "route_request":  # a replica index is an int: nothing to copy
        assert result is not answer


class Index(int):
    """An int subclass that lies about its value where a plain int is asked for."""

    def __index__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def test_a_route_answer_is_read_as_the_int_it_stores(world: World) -> None:
    facade = PolicyFacade([("p", scripted(route_request=Index(2)))], strict=True)
    result = facade.route(world.waiting[0], world.replicas)
    assert type(result) is int and int.__repr__(result) == "2"  # its stored value, not 0


def test_a_list_subclass_is_read_as_the_list_it_stores(world: World) -> None:
    class Lying(list):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return iter(())

        def __len__(self) -> int:
            return 0

    facade = PolicyFacade([("p", scripted(order_waiting=Lying(world.waiting[::-1])))])

    order = facade.order_waiting(world.waiting, world.engine)

    assert type(order) is list and order == world.waiting[::-1]
    assert not facade.errors


@pytest.mark.parametrize("hook", HOOK_NAMES)
@pytest.mark.parametrize("exc", [GeneratorExit(), BaseException("odd"), StopIteration()])
def test_base_exceptions_other_than_stop_requests_are_isolated(
    hook: str, exc: BaseException, world: World
) -> None:
    facade = PolicyFacade([("broken", scripted(**{hook: raising(exc)}))])  # type: ignore[arg-type]
    assert call(facade, hook, world) == ENGINE_DEFAULT.get(hook)
    assert facade.errors == {("broken", hook): 1}


def test_keyboard_interrupt_leaves_the_facade(world: World) -> None:
    facade = PolicyFacade([("p", scripted(order_waiting=raising(KeyboardInterrupt())))])  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        call(facade, "order_waiting", world)


def test_system_exit_from_a_policy_is_a_fault(world: World) -> None:
    facade = PolicyFacade([("p", scripted(order_waiting=raising(SystemExit(1))))])  # type: ignore[arg-type]
    assert call(facade, "order_waiting", world) is None
    assert facade.errors == {("p", "order_waiting"): 1}


def test_an_exception_that_cannot_be_printed_is_logged_by_its_type(
    world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    facade = PolicyFacade([("p", scripted(admit_request=raising(Unprintable())))])

    assert call(facade, "admit_request", world) is ADMIT
    [message] = warnings_about(warnings_log, "p", "admit_request")
    assert "raised Unprintable: <unprintable Unprintable>" in message


def test_a_long_exception_message_is_truncated(
    world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    facade = PolicyFacade([("p", scripted(admit_request=raising(ValueError("x" * 10_000))))])
    call(facade, "admit_request", world)
    [message] = warnings_about(warnings_log, "p", "admit_request")
    assert "ValueError: " + "x" * 199 + "…;" in message


# -- hook time budget -------------------------------------------------------------------


def slow(answer: Any, seconds: float = 0.005) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        time.sleep(seconds)
        return answer(*args) if callable(answer) else answer

    return call


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_a_call_over_the_hook_budget_is_counted_logged_once_and_still_used(
    hook: str, world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    answer = FIRST.get(hook)
    policy = scripted(**{hook: slow(answer)})
    facade = PolicyFacade([("slow", policy)], hook_budget_ms=1)

    results = [call(facade, hook, world) for _ in range(3)]

    if answer is not None:
        assert results[0] == answer(*policy.calls_to(hook)[0])  # the answer is used
    assert facade.slow_calls == {("slow", hook): 3}
    assert facade.slow_call_count == 3
    assert not facade.errors
    [message] = [m for m in warnings_about(warnings_log, "slow", hook) if "budget" in m]
    assert "over the 1 ms hook budget; its answer is still used" in message


def test_calls_within_the_budget_are_not_counted(world: World) -> None:
    facade = PolicyFacade(
        [("p", scripted(**{hook: FIRST.get(hook) for hook in HOOK_NAMES}))],
        hook_budget_ms=10_000,
    )
    for hook in HOOK_NAMES:
        call(facade, hook, world)
    assert not facade.slow_calls and not facade.errors


def test_a_slow_call_that_raises_is_a_fault_and_slow(world: World) -> None:
    def answer(*args: Any) -> Any:
        time.sleep(0.005)
        raise RuntimeError("late and wrong")

    facade = PolicyFacade([("p", scripted(order_waiting=answer))], hook_budget_ms=1)
    assert call(facade, "order_waiting", world) is None
    assert facade.errors == facade.slow_calls == {("p", "order_waiting"): 1}


def test_no_hook_budget_by_default(world: World) -> None:
    facade = PolicyFacade([("slow", scripted(order_waiting=slow(FIRST["order_waiting"])))])
    assert facade.hook_budget_ms is None
    call(facade, "order_waiting", world)
    assert not facade.slow_calls


def test_from_config_takes_a_hook_budget() -> None:
    facade = PolicyFacade.from_config("priority", hook_budget_ms=2)
    assert facade.hook_budget_ms == 2.0
    config = {"policy": ["priority"], "hook_budget_ms": 5}
    assert PolicyFacade.from_config(config).hook_budget_ms == 5.0  # from the config
    assert PolicyFacade.from_config(config, hook_budget_ms=2).hook_budget_ms == 2.0
    assert PolicyFacade.from_config("priority").hook_budget_ms is None


@pytest.mark.parametrize("budget", [0, -3, "soon", 1e9])
def test_a_bad_hook_budget_in_the_config_names_the_field(budget: Any) -> None:
    with pytest.raises(PolicyConfigError, match="hook_budget_ms"):
        PolicyFacade.from_config({"policy": ["priority"], "hook_budget_ms": budget})


@pytest.mark.parametrize(
    "budget",
    [0, -1, math.nan, math.inf, True, "5", 10**400],
    ids=["zero", "negative", "nan", "inf", "bool", "str", "huge-int"],
)
def test_an_invalid_hook_budget_is_refused(budget: Any) -> None:
    with pytest.raises(PolicyConfigError, match="hook_budget_ms must be a positive number"):
        PolicyFacade([], hook_budget_ms=budget)


# -- zero cost --------------------------------------------------------------------------


class CountingPolicy(Policy):
    """Implements only ``on_step_finished`` (a method named after any other hook, without
    ``@hookimpl``, is refused at load: test_a_hook_named_method_without_hookimpl_...)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    @hookimpl
    def on_step_finished(self, report: Any, engine: Any) -> None:
        self.calls["on_step_finished"] += 1


def test_unimplemented_hooks_are_never_called(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pluggy_call = pluggy.HookCaller.__call__

    def no_schedkit_hook_calls(caller: pluggy.HookCaller, **kwargs: Any) -> Any:
        # pytest runs on pluggy too: only schedkit's hook names are off limits.
        assert caller.name not in HOOK_NAMES, f"pluggy called hook {caller.name}"
        return pluggy_call(caller, **kwargs)

    monkeypatch.setattr(pluggy.HookCaller, "__call__", no_schedkit_hook_calls)
    policy = CountingPolicy()
    facade = PolicyFacade([("counting", policy)])

    assert facade.implemented == {"on_step_finished"}
    flags = [
        facade.has_admit,
        facade.has_order,
        facade.has_plan,
        facade.has_victims,
        facade.has_evictions,
        facade.has_finish_observer,
    ]
    assert flags == [False] * 6
    assert facade.has_step_observer

    for hook in HOOK_NAMES:
        result = call(facade, hook, world)
        assert result == ENGINE_DEFAULT.get(hook)

    assert policy.calls == {"on_step_finished": 1}
    assert facade.order_waiting(world.waiting, world.engine) is None


def test_no_policy_at_all_implements_nothing(world: World) -> None:
    facade = PolicyFacade([])
    assert facade.implemented == frozenset()
    assert [call(facade, hook, world) for hook in DECISION_HOOKS] == [
        ENGINE_DEFAULT[hook] for hook in DECISION_HOOKS
    ]


def test_builtin_default_facade_implements_nothing() -> None:
    facade = PolicyFacade.from_config(None)
    assert facade.label == "fcfs"
    assert facade.implemented == frozenset()
    assert not any(
        [
            facade.has_admit,
            facade.has_order,
            facade.has_plan,
            facade.has_victims,
            facade.has_evictions,
            facade.has_step_observer,
            facade.has_finish_observer,
        ]
    )


# -- implementations that take a subset of the arguments --------------------------------


class SubsetPolicy(Policy):
    """Each impl takes some of its hook's arguments, some in another order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[Any, ...]] = {}

    @hookimpl
    def admit_request(self, engine: Any) -> Any:
        self.seen["admit_request"] = (engine,)
        return Admission.reject("engine only")

    @hookimpl
    def order_waiting(self) -> Any:
        self.seen["order_waiting"] = ()
        return None

    @hookimpl
    def plan_batch(self, default: Any) -> Any:
        self.seen["plan_batch"] = (default,)
        return BatchBudget(default.token_budget // 2, default.max_running, default.prefill_chunk)

    @hookimpl
    def select_victims(self, needing: Any) -> Any:
        self.seen["select_victims"] = (needing,)
        return [needing]

    @hookimpl
    def select_evictions(self, num_blocks: Any, candidates: Sequence[Any]) -> Any:
        self.seen["select_evictions"] = (num_blocks, candidates)
        return list(candidates[:num_blocks])

    @hookimpl
    def route_request(self, replicas: Sequence[Any]) -> Any:
        self.seen["route_request"] = (replicas,)
        return len(replicas) - 1

    @hookimpl
    def on_request_arrived(self, engine: Any) -> None:
        self.seen["on_request_arrived"] = (engine,)

    @hookimpl
    def on_step_finished(self, engine: Any, report: Any) -> None:
        self.seen["on_step_finished"] = (engine, report)

    @hookimpl
    def on_request_finished(self, reason: Any, request: Any) -> None:
        self.seen["on_request_finished"] = (reason, request)


def test_impls_taking_a_subset_of_arguments_receive_the_right_ones(world: World) -> None:
    policy = SubsetPolicy()
    facade = PolicyFacade([("subset", policy)], strict=True)
    w = world

    assert facade.implemented == set(DECISION_HOOKS) | set(OBSERVATION_HOOKS)
    assert facade.admit(w.waiting[0], w.engine).reason == "engine only"
    assert facade.order_waiting(w.waiting, w.engine) is None
    assert facade.plan_batch(w.engine, DEFAULT) == BatchBudget(1024, 16, 512)
    assert facade.select_victims(w.running, w.running[2], w.engine) == [w.running[2]]
    assert facade.select_evictions(w.blocks, 3, w.engine) == w.blocks[:3]
    assert facade.route(w.waiting[0], w.replicas) == 3
    facade.step_finished(w.report, w.engine)
    facade.request_finished(w.waiting[1], "length", w.engine)

    assert policy.seen == {
        "on_request_arrived": (w.engine,),
        "admit_request": (w.engine,),
        "order_waiting": (),
        "plan_batch": (DEFAULT,),
        "select_victims": (w.running[2],),
        "select_evictions": (3, w.blocks),
        "route_request": (w.replicas,),
        "on_step_finished": (w.engine, w.report),
        "on_request_finished": ("length", w.waiting[1]),
    }


# -- invalid policies -------------------------------------------------------------------


class Misspelled(Policy):
    @hookimpl
    def order_wating(self, waiting: Any, engine: Any) -> Any:
        return None


class UnknownArgument(Policy):
    @hookimpl
    def admit_request(self, request: Any, tenant: Any) -> Any:
        return None


def test_misspelled_hook_is_rejected_naming_the_hooks() -> None:
    with pytest.raises(PluginLoadError) as excinfo:
        PolicyFacade([("typo", Misspelled())])
    message = str(excinfo.value)
    assert "order_wating" in message
    assert ", ".join(HOOK_NAMES) in message


def test_misspelled_hook_error_names_the_policy() -> None:
    with pytest.raises(PluginLoadError, match="'typo'"):
        PolicyFacade([("typo", Misspelled())])


def test_impl_with_an_unknown_argument_is_rejected() -> None:
    with pytest.raises(PluginLoadError, match=r"(?s)policy 'badarg'.*'tenant'"):
        PolicyFacade([("badarg", UnknownArgument())])


class Unmarked(Policy):
    def order_waiting(self, waiting: Any, engine: Any) -> Any:  # no @hookimpl
        return sorted(waiting, key=lambda r: r.prompt_tokens)

    @hookimpl
    def admit_request(self, request: Any, engine: Any) -> Any:
        return None


class Victims(Policy):
    @hookimpl
    def select_victims(self, running: Any, needing: Any, engine: Any) -> Any:
        return list(reversed(running))


class UnmarkedOverride(Victims):
    def select_victims(self, running: Any, needing: Any, engine: Any) -> Any:  # no @hookimpl
        return list(running)


class WithHelpers(Policy):
    """Helpers named otherwise, and a hook-named attribute that is not a method: fine."""

    order_waiting_note = "shortest first"

    def _order_waiting(self, waiting: Any) -> Any:
        return waiting

    @hookimpl
    def order_waiting(self, waiting: Any, engine: Any) -> Any:
        return self._order_waiting(waiting)


def test_a_hook_named_method_without_hookimpl_is_refused_at_load() -> None:
    # pluggy skips it, so the policy would silently run as if it had no order_waiting
    with pytest.raises(PluginLoadError) as excinfo:
        PolicyFacade([("sjf-by-hand", Unmarked())])
    message = str(excinfo.value)
    assert "policy 'sjf-by-hand' defines order_waiting() without @hookimpl" in message
    assert "@schedkit.hookimpl" in message and "admit_request" not in message
    with pytest.raises(PluginLoadError, match=r"defines select_victims\(\) without"):
        PolicyFacade([("base", Victims()), ("sub", UnmarkedOverride())])
    assert "order_waiting" in PolicyFacade([("helpers", WithHelpers())]).implemented


def test_observation_hooks_are_consulted_in_configured_order(world: World) -> None:
    seen: list[str] = []
    a = scripted(on_step_finished=lambda r, e: seen.append("a"))
    b = scripted(on_step_finished=lambda r, e: seen.append("b"))
    PolicyFacade([("b", b), ("a", a)]).step_finished(world.report, world.engine)
    assert seen == ["b", "a"]


def test_observation_hooks_are_listed() -> None:
    assert set(OBSERVATION_HOOKS) | set(DECISION_HOOKS) | set(KEY_HOOKS) == set(HOOK_NAMES)
