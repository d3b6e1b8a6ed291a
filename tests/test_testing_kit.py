"""The conformance kit passes conforming policies and fails each kind of broken one."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pytest
from pydantic import ConfigDict

from schedkit import (
    Admission,
    BatchBudget,
    BlockView,
    EngineView,
    Policy,
    PolicyOptions,
    RequestState,
    RequestView,
    StepReport,
    hookimpl,
)
from schedkit.errors import PolicyConfigError
from schedkit.testing import ConformanceError, check_policy, conformance_test

# Few examples keep the suite fast; the broken policies fail on almost any state.
EXAMPLES = 30


@pytest.mark.parametrize(
    "name", ["fcfs", "priority", "round-robin", "least-loaded", "power-of-two"]
)
def test_builtin_policies_conform(name: str) -> None:
    check_policy(name, max_examples=EXAMPLES, seed=0)


class TenantFairness(Policy):
    """Conforming and stateful: least-served tenant first, counting tokens per tenant."""

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.served: Counter[str] = Counter()

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject("queue full") if engine.num_waiting >= 20 else None

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=lambda r: (self.served[r.tenant], r.arrival_time))

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        half = max(1, default.max_running // 2)
        return BatchBudget(default.token_budget, half, default.prefill_chunk)

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        return sorted(running, key=lambda r: -self.served[r.tenant])

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        return sorted(candidates, key=lambda b: (b.num_hits, -b.depth))[:num_blocks]

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        for request, tokens in zip(report.scheduled, report.num_scheduled_tokens, strict=True):
            self.served[request.tenant] += tokens

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self.served[request.tenant] += 0


def test_stateful_policy_implementing_every_hook_conforms() -> None:
    check_policy(TenantFairness, max_examples=EXAMPLES, seed=1)


# --- broken policies: each must fail --------------------------------------------------


class DropsRequest(Policy):
    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        return list(waiting)[1:]


class ForeignVictim(Policy):
    @hookimpl
    def select_victims(self, running: Sequence[RequestView]) -> list[RequestView]:
        return [RequestState("not-running", 1, 1)]


class Raises(Policy):
    @hookimpl
    def plan_batch(self, engine: EngineView) -> BatchBudget:
        raise RuntimeError("boom")


class TooFewEvictions(Policy):
    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        return list(candidates)[: num_blocks - 1]


class EmptyRejection(Policy):
    @hookimpl
    def admit_request(self) -> Admission:
        return Admission.reject("")


class RandomOrder(Policy):
    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        order = list(waiting)
        random.SystemRandom().shuffle(order)
        return order


class MutatesInput(Policy):
    @hookimpl
    def order_waiting(self, waiting: list[RequestView]) -> list[RequestView]:
        waiting.reverse()
        return list(waiting)


class MutatesRequest(Policy):
    @hookimpl
    def on_request_finished(self, request: RequestState) -> None:
        request.priority += 1


class StarvesAfterWarmUp(Policy):
    """Fine on a fresh instance; drops a request once it has observed 20 steps."""

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        self.steps = 0

    @hookimpl
    def on_step_finished(self) -> None:
        self.steps += 1

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        return list(waiting)[1:] if self.steps > 20 else list(waiting)


class SharedCounter(Policy):
    """State on the class, shared by all instances: two fresh instances disagree."""

    calls: ClassVar[int] = 0

    @hookimpl
    def admit_request(self) -> Admission:
        SharedCounter.calls += 1
        return Admission.reject("every other") if SharedCounter.calls % 2 else Admission.admit()


BROKEN: list[tuple[type[Policy], str, str]] = [
    (DropsRequest, "order_waiting", "requests for a waiting queue"),
    (ForeignVictim, "select_victims", "not a running request"),
    (Raises, "plan_batch", "raised RuntimeError: boom"),
    (TooFewEvictions, "select_evictions", "needed"),
    (EmptyRejection, "admit_request", "rejected without a reason"),
    (RandomOrder, "order_waiting", "not deterministic"),
    (MutatesInput, "order_waiting", "mutated its argument waiting"),
    (MutatesRequest, "on_request_finished", "mutated its argument request"),
    (StarvesAfterWarmUp, "order_waiting", "stateful sequence"),
    (SharedCounter, "admit_request", "not deterministic"),
]


@pytest.mark.parametrize(
    ("policy", "hook", "problem"), BROKEN, ids=lambda v: getattr(v, "__name__", "")
)
def test_broken_policy_fails(policy: type[Policy], hook: str, problem: str) -> None:
    with pytest.raises(ConformanceError) as info:
        check_policy(policy, max_examples=EXAMPLES, seed=2)
    message = str(info.value)
    assert f"policy {policy.__name__!r}" in message
    assert hook in message
    assert problem in message
    assert "seed=2" in message


def test_failure_shows_the_state() -> None:
    with pytest.raises(ConformanceError) as info:
        check_policy(DropsRequest, max_examples=EXAMPLES, seed=3)
    message = str(info.value)
    assert "waiting = [" in message
    assert "RequestState(request_id='w0', arrival_time=" in message
    assert "engine = EngineState(block_size=" in message


class Misspelled(Policy):
    @hookimpl
    def order_wating(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        return list(waiting)


def test_misspelled_hook_fails() -> None:
    with pytest.raises(ConformanceError, match=r"cannot be registered.*order_wating"):
        check_policy(Misspelled, max_examples=EXAMPLES)


def test_conformance_error_is_an_assertion_error() -> None:
    assert issubclass(ConformanceError, AssertionError)


class LooseOptions(Policy):
    class Options(PolicyOptions):
        model_config = ConfigDict(extra="ignore", frozen=True)


def test_options_that_ignore_unknown_fields_fail() -> None:
    with pytest.raises(ConformanceError, match="accepts unknown fields"):
        check_policy(LooseOptions, max_examples=EXAMPLES)


class Bounded(Policy):
    class Options(PolicyOptions):
        limit: int = 1

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget:
        assert isinstance(self.options, Bounded.Options)
        limit = min(self.options.limit, default.token_budget)
        return BatchBudget(limit, default.max_running, min(limit, default.prefill_chunk))


def test_options_are_validated_and_used() -> None:
    check_policy(Bounded, {"limit": 64}, max_examples=EXAMPLES, seed=4)
    with pytest.raises(PolicyConfigError, match="limit"):
        check_policy(Bounded, {"limit": "many"})
    with pytest.raises(PolicyConfigError, match="limti"):
        check_policy(Bounded, {"limti": 3})


def test_unknown_policy_name_names_the_installed_ones() -> None:
    with pytest.raises(KeyError, match="fcfs"):
        check_policy("no-such-policy")


def test_same_seed_same_verdict() -> None:
    messages = []
    for _ in range(2):
        with pytest.raises(ConformanceError) as info:
            check_policy(DropsRequest, max_examples=EXAMPLES, seed=5)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


test_conformance_of_priority = conformance_test("priority", max_examples=EXAMPLES, seed=6)


def test_conformance_test_builds_a_test_function() -> None:
    test: Callable[[], None] = conformance_test(DropsRequest, max_examples=EXAMPLES, seed=7)
    assert test.__name__.startswith("test_")
    assert "DropsRequest" in (test.__doc__ or "")
    with pytest.raises(ConformanceError):
        test()


def test_fixture_is_check_policy(schedkit_conformance: Callable[..., None]) -> None:
    assert schedkit_conformance is check_policy


def test_import_does_not_load_hypothesis() -> None:
    code = "import sys, schedkit.testing; assert 'hypothesis' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_hypothesis_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(ImportError, match=r"pip install 'schedkit\[test\]'"):
        check_policy("fcfs")
