"""slo: installed, selectable by config only, EDF order, early rejection, step budget, conforms."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError
from schedkit import (
    BatchBudget,
    EngineState,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    RequestView,
    StepReport,
    load_config,
)
from schedkit.errors import PolicyConfigError
from schedkit.plugins import implemented_hooks
from schedkit.testing import conformance_test, contract_test

from schedkit_slo import DeadlineAware

NAME = "slo"


def request(
    request_id: str,
    prompt: int = 100,
    *,
    arrival: float = 0.0,
    tenant: str = "default",
    ttft: float | None = None,
    output: int = 0,
) -> RequestState:
    return_state = RequestState(
        request_id, prompt, 64, arrival_time=arrival, tenant=tenant, slo_ttft_ms=ttft
    )
    return_state.num_output_tokens = output
    return return_state


def engine_at(clock: float, *, waiting: int = 0, running: int = 0) -> EngineState:
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    engine.clock = clock
    engine.num_waiting = waiting
    engine.num_running = running
    return engine


def ids(requests: Sequence[RequestView]) -> list[str]:
    return [r.request_id for r in requests]


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-slo"
    assert entry.target == "schedkit_slo:DeadlineAware"
    assert entry.load() is DeadlineAware


def test_selectable_by_config_not_active_by_default() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.implemented == {
        "admit_request",
        "order_waiting",
        "plan_batch",
        "on_step_finished",
        "on_request_finished",
    }
    assert NAME not in load_config(None).policy


# --- targets and deadlines ----------------------------------------------------------


def test_targets_come_from_the_request_then_the_tenant_then_the_defaults() -> None:
    policy = DeadlineAware(
        ttft_ms=1000, tpot_ms=50, tenants={"batch": {"ttft_ms": 30_000}, "fast": {"tpot_ms": 20}}
    )
    assert policy.targets(request("a")) == (1000, 50)
    assert policy.targets(request("b", tenant="batch")) == (30_000, 50)
    assert policy.targets(request("c", tenant="fast")) == (1000, 20)
    assert policy.targets(request("d", tenant="batch", ttft=250)) == (250, 50)
    assert policy.deadline(request("e", arrival=2.0, tenant="batch")) == 32.0
    assert policy.deadline(request("f", arrival=2.0, output=3)) == -math.inf


# --- ordering -----------------------------------------------------------------------


def test_earliest_deadline_first_then_arrival() -> None:
    policy = DeadlineAware(ttft_ms=1000)
    waiting = [
        request("relaxed", arrival=0.0, ttft=5000),  # due 5.0
        request("tight-late", arrival=0.5, ttft=200),  # due 0.7
        request("default", arrival=0.2),  # due 1.2
        request("tight-early", arrival=0.4, ttft=300),  # due 0.7: earlier arrival wins
    ]
    order = policy.order_waiting(waiting, engine_at(0.6))
    assert ids(order) == ["tight-early", "tight-late", "default", "relaxed"]
    assert ids(waiting) == ["relaxed", "tight-late", "default", "tight-early"]  # untouched


def test_resumed_requests_first_and_late_ones_last() -> None:
    waiting = [
        request("late", arrival=0.0, ttft=100),  # due 0.1, now 1.0: missed already
        request("due", arrival=0.5),  # due 1.5
        request("resumed", arrival=0.9, output=5),  # preempted after its first token
    ]
    assert ids(DeadlineAware().order_waiting(waiting, engine_at(1.0))) == [
        "resumed",
        "due",
        "late",
    ]
    edf = DeadlineAware(late_last=False)
    assert ids(edf.order_waiting(waiting, engine_at(1.0))) == ["resumed", "late", "due"]


# --- admission ----------------------------------------------------------------------


def test_rejects_with_a_reason_when_the_queue_ahead_is_too_long() -> None:
    policy = DeadlineAware(ttft_ms=1000, prefill_tokens_per_s=10_000)
    engine = engine_at(0.0)
    # 10,000 tokens/s: each 4000-token prompt is 400 ms of prefill.
    assert policy.admit_request(request("a", 4000), engine) is None
    engine.num_waiting = 1
    assert policy.admit_request(request("b", 4000), engine) is None
    engine.num_waiting = 2
    assert policy.predicted_ttft_ms(request("c", 4000), engine) == pytest.approx(1200)
    decision = policy.admit_request(request("c", 4000), engine)
    assert decision is not None and not decision.admitted
    assert decision.reason == "predicted TTFT 1200 ms exceeds SLO 1000 ms"
    # A short one still fits: 8000 + 1000 tokens = 900 ms.
    assert policy.admit_request(request("d", 1000), engine) is None
    assert policy.backlog.total() == 9000


def test_a_tighter_deadline_only_counts_the_work_due_before_it() -> None:
    policy = DeadlineAware(ttft_ms=10_000, prefill_tokens_per_s=10_000)
    engine = engine_at(0.0)
    for i in range(3):
        assert policy.admit_request(request(f"bulk-{i}", 4000), engine) is None
        engine.num_waiting += 1
    # EDF puts a 500 ms deadline before the bulk: only its own 400 ms count.
    assert policy.admit_request(request("urgent", 4000, ttft=500), engine) is None
    rejected = policy.admit_request(request("urgent-2", 2000, ttft=500), engine)
    assert rejected is not None and rejected.reason.startswith("predicted TTFT 600 ms")


def test_slack_and_time_already_waited_count() -> None:
    policy = DeadlineAware(ttft_ms=1000, prefill_tokens_per_s=10_000, slack=2.0)
    new = request("late-arrival", 3000, arrival=1.0)
    assert policy.predicted_ttft_ms(new, engine_at(1.25)) == pytest.approx(250 + 600)


def test_reject_false_never_rejects() -> None:
    policy = DeadlineAware(ttft_ms=1, reject=False)
    assert policy.admit_request(request("huge", 100_000), engine_at(0.0)) is None


def test_backlog_follows_steps_preemptions_and_finishes() -> None:
    policy = DeadlineAware(prefill_tokens_per_s=10_000)
    engine = engine_at(0.0)
    a, b = request("a", 3000), request("b", 2000)
    policy.admit_request(a, engine)
    engine.num_waiting = 1
    policy.admit_request(b, engine)
    assert policy.backlog.total() == 5000
    a.num_computed_tokens = 2000  # a chunk of a
    b.num_computed_tokens, b.num_output_tokens = 2000, 1  # all of b: first token out
    engine.num_waiting, engine.num_running = 0, 2
    policy.on_step_finished(StepReport(1, 0.1, 4000, 0, [a, b], [2000, 2000]), engine)
    assert policy.backlog.total() == 1000 and "b" not in policy.backlog
    b.num_computed_tokens, b.num_output_tokens = 0, 9  # b preempted: recompute 2009 tokens
    policy.on_step_finished(StepReport(1, 0.1, 0, 0, [], [], [b]), engine)
    assert policy.backlog.total() == 1000 + 2009
    policy.on_request_finished(a)
    assert policy.backlog.total() == 2009
    policy.on_step_finished(StepReport(1, 0.1, 0, 0), engine_at(1.0))  # engine idle
    assert policy.backlog.total() == 0


def test_order_waiting_resyncs_requests_another_policy_admitted() -> None:
    policy = DeadlineAware()
    policy.order_waiting([request("x", 700), request("y", 300)], engine_at(0.0))
    assert policy.backlog.total() == 1000


def test_idle_engine_clears_what_the_backlog_missed() -> None:
    policy = DeadlineAware(prefill_tokens_per_s=1000)
    policy.backlog.set("ghost", 0.0, 1_000_000)  # e.g. an abort the policy never saw
    assert policy.admit_request(request("a", 100, arrival=5.0), engine_at(5.0)) is None
    assert policy.backlog.total() == 100


# --- step budget --------------------------------------------------------------------


def test_no_tpot_target_no_budget_opinion() -> None:
    assert DeadlineAware().plan_batch(engine_at(0.0), BatchBudget(8192, 256)) is None


def test_tpot_target_caps_the_step_budget() -> None:
    policy = DeadlineAware(tpot_ms=50, prefill_tokens_per_s=20_000)
    default = BatchBudget(8192, 256, 0)
    assert policy.plan_batch(engine_at(0.0, running=10), default) == BatchBudget(1000, 256, 0)
    # Never below one token per running request plus one.
    capped = policy.plan_batch(engine_at(0.0, running=1500), BatchBudget(8192, 2048))
    assert capped == BatchBudget(1501, 2048, 0)
    assert policy.plan_batch(engine_at(0.0), BatchBudget(512, 256)) is None  # already tighter
    tenant = DeadlineAware(tenants={"fast": {"tpot_ms": 10}}, prefill_tokens_per_s=20_000)
    assert tenant.step_tokens == 200
    assert DeadlineAware(tpot_ms=50, tpot_budget=False).step_tokens is None


def test_through_the_facade_with_options() -> None:
    config: dict[str, Any] = {
        "policy": NAME,
        "options": {NAME: {"ttft_ms": 500, "prefill_tokens_per_s": 1000}},
    }
    facade = PolicyFacade.from_config(config, strict=True)
    decision = facade.admit(request("big", 800), engine_at(0.0))
    assert not decision.admitted and "exceeds SLO 500 ms" in decision.reason
    assert facade.admit(request("small", 100), engine_at(0.0)).admitted


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("ttft_ms", 0),
        ("tpot_ms", -5),
        ("slack", 0.0),
        ("slack", 11),
        ("prefill_tokens_per_s", 0),
        ("tenants", {"a": {"ttft_ms": 0}}),
        ("tenants", {"a": {"ttft": 100}}),
    ],
)
def test_bad_option_value_names_the_field(field: str, bad: object) -> None:
    with pytest.raises(ValidationError, match=field):
        DeadlineAware.Options.model_validate({field: bad})
    config = {"policy": NAME, "options": {NAME: {field: bad}}}
    with pytest.raises(PolicyConfigError, match=f"{NAME}.*{field}"):
        PolicyFacade.from_config(config)


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="ttft\n"):
        DeadlineAware.Options.model_validate({"ttft": 1.0})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_with_targets = conformance_test(
    NAME,
    {"tpot_ms": 50, "tenants": {"tenant-a": {"ttft_ms": 200}}, "prefill_tokens_per_s": 500},
    max_examples=50,
)
test_conformance_edf_only = conformance_test(
    NAME, {"reject": False, "late_last": False}, max_examples=50
)


# --- the CLI ------------------------------------------------------------------------


def test_cli_lists_it_with_its_hooks_and_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    entry = next(e for e in json.loads(result.stdout) if e["name"] == NAME)
    assert entry["distribution"] == "schedkit-slo"
    assert entry["hooks"] == implemented_hooks(DeadlineAware)
    assert "prefill_tokens_per_s" in entry["options_schema"]["properties"]


test_contract = contract_test(NAME)  # on every engine installed here
