"""A hard hook budget, and what a policy may raise (issue #35, part 5).

With ``hook_budget_hard``, a call past the budget is abandoned (counted, the next policy or
the engine default decides) and the policy is skipped until that call returns; nothing a
policy raises stops the engine, except a ``KeyboardInterrupt`` on the main thread and what
a Python signal handler raises. Real threads and real time: the only timing asserted is
that a call returned long before the hook it abandoned would have.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from _policies import make_blocks, make_requests, raising, scripted
from test_facade import ENGINE_DEFAULT, FIRST, SECOND, World, call, warnings_about

from schedkit import EngineState, PolicyFacade, ReplicaState, load_config
from schedkit.errors import PolicyConfigError, PolicyDecisionError
from schedkit.hookspecs import DECISION_HOOKS, HOOK_NAMES

BUDGET_MS = 100  # long enough for a quick call on a loaded machine, far below STALL_S
STALL_S = 10.0  # how long a stalled hook would block if it were waited for
RETURNED_EARLY_S = 1.0  # "the facade did not wait for it"

# An answer per hook that differs from the engine's default.
ANSWERS: dict[str, Any] = {
    **FIRST,
    "waiting_key": lambda *args: 7,
    "victim_key": lambda *args: 7,
    "eviction_key": lambda *args: 7,
    "on_request_arrived": None,
    "on_step_finished": None,
    "on_request_finished": None,
}


@pytest.fixture
def world(engine: EngineState) -> World:
    return World(
        engine=engine, waiting=make_requests(4), running=make_requests(4), blocks=make_blocks(6),
        replicas=[ReplicaState(i, engine) for i in range(4)],
    )  # fmt: skip


class Gate:
    """A hook body that blocks until the gate opens (at most ``STALL_S``), then answers;
    counts its calls and the most that ran at once."""

    def __init__(self, answer: Any, *, spin: bool = False) -> None:
        self.answer = answer
        self.spin = spin  # hold the GIL between bytecodes instead of sleeping
        self.opened = threading.Event()
        self.calls = self.running = self.most = 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.spin:
                deadline = time.monotonic() + STALL_S
                while not self.opened.is_set() and time.monotonic() < deadline:
                    pass
            else:
                self.opened.wait(STALL_S)
            return self.answer(*args) if callable(self.answer) else self.answer
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    """Gates to open at the end of a test, so no abandoned call outlives it by long."""
    made: list[Gate] = []
    yield made
    for gate in made:
        gate.opened.set()


def hard(policies: list[tuple[str, Any]], **kwargs: Any) -> PolicyFacade:
    return PolicyFacade(policies, hook_budget_ms=BUDGET_MS, hook_budget_hard=True, **kwargs)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def eventually(check: Callable[[], bool], timeout_s: float = STALL_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# -- a hard budget ------------------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_a_call_past_a_hard_budget_is_abandoned_and_the_engine_default_decides(
    hook: str, world: World, gates: list[Gate], warnings_log: pytest.LogCaptureFixture
) -> None:
    gate = Gate(ANSWERS[hook])
    gates.append(gate)
    facade = hard([("stalls", scripted(**{hook: gate}))])
    key = ("stalls", hook)

    result, took = timed(lambda: call(facade, hook, world))

    assert took < RETURNED_EARLY_S  # not the hook's STALL_S
    assert result == ENGINE_DEFAULT.get(hook)
    assert facade.errors == facade.abandoned_calls == facade.slow_calls == {key: 1}
    assert facade.abandoned_call_count == 1
    [message] = warnings_about(warnings_log, "stalls", hook)
    assert f"took longer than the {BUDGET_MS} ms hard hook budget and was abandoned" in message

    # While the abandoned call runs on, the policy is skipped at once, not called again.
    result, took = timed(lambda: call(facade, hook, world))
    assert took < RETURNED_EARLY_S
    assert result == ENGINE_DEFAULT.get(hook)
    assert facade.bypassed_calls == {key: 1} and facade.bypassed_call_count == 1
    assert facade.errors == {key: 2} and facade.abandoned_calls == {key: 1}
    assert gate.calls == 1

    # When it returns, the policy is consulted again and its answer used.
    gate.opened.set()
    expected = call(PolicyFacade([("p", scripted(**{hook: ANSWERS[hook]}))]), hook, world)

    def consulted() -> bool:
        return call(facade, hook, world) == expected and gate.calls > 1

    eventually(consulted)
    assert gate.most == 1  # never two calls of the policy at once


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_the_next_policy_decides_when_the_first_is_abandoned(
    hook: str, world: World, gates: list[Gate]
) -> None:
    gate = Gate(FIRST[hook])
    gates.append(gate)
    second = scripted(**{hook: SECOND[hook]})
    facade = hard([("stalls", scripted(**{hook: gate})), ("next", second)])

    result, took = timed(lambda: call(facade, hook, world))

    assert took < RETURNED_EARLY_S
    assert len(second.calls_to(hook)) == 1
    assert result == call(PolicyFacade([("next", scripted(**{hook: SECOND[hook]}))]), hook, world)
    assert facade.abandoned_calls == {("stalls", hook): 1}


def test_a_hook_that_holds_the_gil_is_abandoned_too(world: World, gates: list[Gate]) -> None:
    gate = Gate(FIRST["admit_request"], spin=True)
    gates.append(gate)
    facade = hard([("spins", scripted(admit_request=gate))])

    result, took = timed(lambda: call(facade, "admit_request", world))

    assert took < RETURNED_EARLY_S
    assert result == ENGINE_DEFAULT["admit_request"]
    assert facade.abandoned_calls == {("spins", "admit_request"): 1}


def test_under_a_hard_budget_a_quick_answer_is_used(world: World) -> None:
    facade = hard([("p", scripted(**{hook: ANSWERS[hook] for hook in HOOK_NAMES}))])
    plain = PolicyFacade([("p", scripted(**{hook: ANSWERS[hook] for hook in HOOK_NAMES}))])
    for hook in HOOK_NAMES:
        assert call(facade, hook, world) == call(plain, hook, world)
    assert not facade.errors and not facade.slow_calls and not facade.bypassed_calls


def test_a_policy_that_raises_on_its_thread_is_a_fault(
    world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    facade = hard([("p", scripted(admit_request=raising(ValueError("bad"))))])
    assert call(facade, "admit_request", world) == ENGINE_DEFAULT["admit_request"]
    assert facade.errors == {("p", "admit_request"): 1}
    assert not facade.abandoned_calls and not facade.slow_calls
    [message] = warnings_about(warnings_log, "p", "admit_request")
    assert "raised ValueError: bad" in message


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_stop_requests_raised_on_the_policy_thread_are_isolated(
    stop: type[BaseException], world: World
) -> None:
    facade = hard([("p", scripted(order_waiting=raising(stop("from the policy"))))])  # type: ignore[arg-type]
    assert call(facade, "order_waiting", world) is None
    assert facade.errors == {("p", "order_waiting"): 1}


def test_strict_raises_on_a_time_out_and_while_the_call_runs_on(
    world: World, gates: list[Gate]
) -> None:
    gate = Gate(FIRST["plan_batch"])
    gates.append(gate)
    facade = hard([("stalls", scripted(plan_batch=gate))], strict=True)

    with pytest.raises(PolicyDecisionError, match="hard hook budget and was abandoned"):
        call(facade, "plan_batch", world)
    with pytest.raises(PolicyDecisionError, match="skipped: an abandoned call"):
        call(facade, "plan_batch", world)

    raises = hard([("p", scripted(plan_batch=raising(ValueError("bad"))))], strict=True)
    with pytest.raises(PolicyDecisionError, match="raised ValueError: bad") as raised:
        call(raises, "plan_batch", world)
    assert type(raised.value.__cause__) is ValueError


def test_a_policy_thread_starts_at_the_first_call_and_ends_with_the_facade(
    world: World,
) -> None:
    name = "schedkit-policy-short-lived"
    facade = hard([("short-lived", scripted(admit_request=FIRST["admit_request"]))])
    assert name not in {t.name for t in threading.enumerate()}  # nothing until called

    call(facade, "admit_request", world)
    assert name in {t.name for t in threading.enumerate()}

    del facade
    gc.collect()
    eventually(lambda: name not in {t.name for t in threading.enumerate()})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_policy_thread(world: World) -> None:
    facade = hard([("p", scripted(admit_request=FIRST["admit_request"]))])
    call(facade, "admit_request", world)  # the parent's thread is running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest from here on
        try:
            answer = call(facade, "admit_request", world)
            os.write(write, f"{answer.reason}:{facade.error_count}".encode())
        finally:
            os._exit(0)
    os.close(write)
    reply = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert reply == "first:0"  # the policy answered in the child, no time-out


# -- soft budget: unchanged --------------------------------------------------------------


def test_a_soft_budget_still_waits_and_uses_the_answer(world: World) -> None:
    def late(*args: Any) -> Any:
        time.sleep(0.05)
        return FIRST["admit_request"](*args)

    facade = PolicyFacade([("p", scripted(admit_request=late))], hook_budget_ms=10)
    assert facade.hook_budget_hard is False
    assert call(facade, "admit_request", world).reason == "first"
    assert facade.slow_calls == {("p", "admit_request"): 1}
    assert not facade.errors and not facade.abandoned_calls


# -- configuration ------------------------------------------------------------------------


def test_the_config_makes_the_budget_hard() -> None:
    config = {"policy": ["priority"], "hook_budget_ms": 5, "hook_budget_hard": True}
    facade = PolicyFacade.from_config(config)
    assert facade.hook_budget_ms == 5.0 and facade.hook_budget_hard is True
    assert PolicyFacade.from_config(config, hook_budget_hard=False).hook_budget_hard is False
    soft = PolicyFacade.from_config({"policy": ["priority"], "hook_budget_ms": 5})
    assert soft.hook_budget_hard is False
    override = PolicyFacade.from_config("priority", hook_budget_ms=5, hook_budget_hard=True)
    assert override.hook_budget_hard is True


def test_a_hard_budget_without_a_budget_names_the_fix() -> None:
    with pytest.raises(PolicyConfigError, match="hook_budget_hard = true needs hook_budget_ms"):
        load_config({"policy": ["priority"], "hook_budget_hard": True})
    with pytest.raises(PolicyConfigError, match="give hook_budget_ms too"):
        PolicyFacade([], hook_budget_hard=True)
    with pytest.raises(PolicyConfigError, match="give hook_budget_ms too"):
        PolicyFacade.from_config("priority", hook_budget_hard=True)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_hook_budget_hard_is_a_bool(value: Any) -> None:
    with pytest.raises(PolicyConfigError, match="hook_budget_hard"):
        load_config({"policy": ["priority"], "hook_budget_ms": 5, "hook_budget_hard": value})
    with pytest.raises(PolicyConfigError, match="hook_budget_hard must be True or False"):
        PolicyFacade([], hook_budget_ms=5, hook_budget_hard=value)


# -- what a policy may raise ---------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_system_exit_from_a_policy_is_isolated_and_counted(
    hook: str, world: World, warnings_log: pytest.LogCaptureFixture
) -> None:
    def exits(*args: Any) -> Any:
        sys.exit(3)

    facade = PolicyFacade([("exits", scripted(**{hook: exits}))])

    assert call(facade, hook, world) == ENGINE_DEFAULT.get(hook)
    assert facade.errors == {("exits", hook): 1}
    [message] = warnings_about(warnings_log, "exits", hook)
    assert "raised SystemExit: 3" in message


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_keyboard_interrupt_on_the_main_thread_propagates(hook: str, world: World) -> None:
    facade = PolicyFacade([("p", scripted(**{hook: raising(KeyboardInterrupt())}))])  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        call(facade, hook, world)
    assert not facade.errors


def test_keyboard_interrupt_off_the_main_thread_is_isolated(world: World) -> None:
    facade = PolicyFacade([("p", scripted(admit_request=raising(KeyboardInterrupt())))])  # type: ignore[arg-type]
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(call(facade, "admit_request", world)))
    thread.start()
    thread.join()
    assert results == [ENGINE_DEFAULT["admit_request"]]
    assert facade.errors == {("p", "admit_request"): 1}


class Shutdown:
    """An engine whose signal handler is a bound method, as some servers install."""

    def handle(self, signum: int, frame: FrameType | None) -> None:
        raise SystemExit(f"signal {signum}")


def exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(f"signal {signum}")  # as vLLM's engine core does on SIGTERM


@pytest.fixture(params=["function", "method"])
def signal_handler(request: pytest.FixtureRequest) -> Iterator[None]:
    handler = exit_on_signal if request.param == "function" else Shutdown().handle
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
@pytest.mark.parametrize("budget", ["none", "soft", "hard"])
def test_system_exit_from_a_signal_handler_propagates(
    budget: str, world: World, signal_handler: None
) -> None:
    def signalled(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.5)  # the handler runs here (or, under a hard budget, in the wait)
        return FIRST["plan_batch"](*args)

    facade = PolicyFacade(
        [("p", scripted(plan_batch=signalled))],
        hook_budget_ms=None if budget == "none" else 5_000,
        hook_budget_hard=budget == "hard",
    )
    with pytest.raises(SystemExit, match="signal"):
        call(facade, "plan_batch", world)
    assert not facade.errors


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_system_exit_from_a_policy_is_isolated_with_a_handler_installed(
    world: World, signal_handler: None
) -> None:
    facade = PolicyFacade([("p", scripted(plan_batch=raising(SystemExit("policy"))))])  # type: ignore[arg-type]
    assert call(facade, "plan_batch", world) == ENGINE_DEFAULT["plan_batch"]
    assert facade.errors == {("p", "plan_batch"): 1}
