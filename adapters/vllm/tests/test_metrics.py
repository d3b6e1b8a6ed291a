"""schedkit's Prometheus metrics, counted by the real vLLM scheduler (no model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from conftest import make_request, run_until_idle
from prometheus_client import REGISTRY
from schedkit import Admission, EngineView, Policy, RequestView, hookimpl
from schedkit.adapter.runtime import MAX_KEPT_REASONS
from schedkit.prometheus import MAX_REASON_LABELS, reason_label


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


class RejectBlocked(Policy):
    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject("tenant blocked") if request.tenant == "blocked" else None


class Flaky(Policy):
    """Orders the waiting queue, but raises on every other call."""

    calls = 0

    @hookimpl
    def order_waiting(self, waiting: list[RequestView], engine: EngineView) -> Any:
        Flaky.calls += 1
        if Flaky.calls % 2:
            raise RuntimeError("flaky")
        return list(reversed(waiting))


def test_no_config_registers_nothing(make_scheduler: Callable[..., Any]) -> None:
    scheduler = make_scheduler(None)
    assert scheduler.schedkit is None
    scheduler.add_request(make_request("a", 20))
    run_until_idle(scheduler)
    # A stock scheduler never touches the metrics (they may exist from other tests).


def test_rejections_decisions_latency(
    make_scheduler: Callable[..., Any], register_policy: Callable[[str, type[Policy]], None]
) -> None:
    register_policy("reject-blocked", RejectBlocked)
    label = "reject-blocked+priority"
    before = {
        "rejected": sample("schedkit_rejections_total", policy=label, reason="tenant blocked"),
        "admit": sample("schedkit_policy_decisions_total", policy=label, hook="admit_request"),
        "order": sample("schedkit_hook_latency_seconds_count", policy=label, hook="order_waiting"),
    }
    scheduler = make_scheduler({"policy": ["reject-blocked", "priority"]})
    for i in range(4):
        tenant = "blocked" if i == 1 else "ok"
        scheduler.add_request(make_request(f"r{i}", 20, priority=i % 2, tenant=tenant))
    run_until_idle(scheduler)
    label_rej = sample("schedkit_rejections_total", policy=label, reason="tenant blocked")
    assert label_rej - before["rejected"] == 1
    decisions = sample("schedkit_policy_decisions_total", policy=label, hook="admit_request")
    assert decisions - before["admit"] == 1  # only the rejection is a decision
    orders = sample("schedkit_hook_latency_seconds_count", policy=label, hook="order_waiting")
    assert orders - before["order"] >= 1
    assert sample("schedkit_hook_latency_seconds_sum", policy=label, hook="order_waiting") > 0


def test_preemption_victims_counted(make_scheduler: Callable[..., Any]) -> None:
    before = sample("schedkit_preemption_victims_total", policy="priority")
    # Four 64-token prompts fill the 16 usable blocks: the first decode step preempts.
    scheduler = make_scheduler({"policy": ["priority"]}, num_blocks=17)
    for i, priority in enumerate([0, 5, 0, 0]):
        scheduler.add_request(make_request(f"v{i}", 64, max_tokens=40, priority=priority))
    run = run_until_idle(scheduler)
    placed = scheduler.schedkit.num_victims_placed
    assert any(run.preempted) and placed > 0
    assert sample("schedkit_preemption_victims_total", policy="priority") - before == placed


def test_policy_errors_counted(
    make_scheduler: Callable[..., Any], register_policy: Callable[[str, type[Policy]], None]
) -> None:
    register_policy("flaky", Flaky)
    before = sample("schedkit_policy_errors_total", policy="flaky", hook="order_waiting")
    scheduler = make_scheduler({"policy": ["flaky"]}, max_num_seqs=2)
    for i in range(6):
        scheduler.add_request(make_request(f"f{i}", 20))
    run = run_until_idle(scheduler)
    assert len(run.finished) == 6
    errors = scheduler.schedkit.policy_errors
    assert errors > 0
    assert sample(
        "schedkit_policy_errors_total", policy="flaky", hook="order_waiting"
    ) - before == (errors)


class Slow(Policy):
    """Keeps the engine's order, taking 2 ms to decide so."""

    @hookimpl
    def order_waiting(self, waiting: list[RequestView], engine: EngineView) -> Any:
        time.sleep(0.002)
        return None


def test_calls_over_the_hook_budget_counted(
    make_scheduler: Callable[..., Any], register_policy: Callable[[str, type[Policy]], None]
) -> None:
    register_policy("slow", Slow)
    name = "schedkit_hook_over_budget_total"
    before = sample(name, policy="slow", hook="order_waiting")
    scheduler = make_scheduler({"policy": ["slow"], "hook_budget_ms": 1}, max_num_seqs=2)
    for i in range(4):
        scheduler.add_request(make_request(f"s{i}", 20))
    run = run_until_idle(scheduler)
    assert len(run.finished) == 4
    slow = scheduler.schedkit.facade.slow_call_count
    assert slow > 0 and scheduler.schedkit.policy_errors == 0  # slow is not a fault
    assert sample(name, policy="slow", hook="order_waiting") - before == slow


class RejectEchoing(Policy):
    """Rejects every request with the client's own words in the reason (its tenant)."""

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if request.tenant.startswith("coded"):
            return Admission.reject(f"tenant {request.tenant} over quota", code="tenant_quota")
        return Admission.reject(f"tenant {request.tenant} over quota")


def _series(name: str, policy: str) -> int:
    return sum(
        1
        for metric in REGISTRY.collect()
        for s in metric.samples
        if s.name == name and s.labels.get("policy") == policy
    )


def test_client_chosen_rejection_texts_cannot_grow_the_series(
    make_scheduler: Callable[..., Any], register_policy: Callable[[str, type[Policy]], None]
) -> None:
    register_policy("reject-echoing", RejectEchoing)
    scheduler = make_scheduler({"policy": ["reject-echoing"]})

    def letters(i: int) -> str:  # numbers in a reason are grouped as N: use letters
        return "".join(chr(97 + int(d)) for d in f"{i:04d}")

    for i in range(1000):  # 1,000 distinct texts, chosen by the clients
        scheduler.add_request(make_request(f"e{i}", 20, tenant=letters(i)))
    for i in range(5):  # with a code: one label however the text varies
        scheduler.add_request(make_request(f"c{i}", 20, tenant=f"coded{i}"))
    run_until_idle(scheduler)
    # The texts' labels stop at MAX_REASON_LABELS, plus "other"; the code has its own.
    assert _series("schedkit_rejections_total", "reject-echoing") == MAX_REASON_LABELS + 2
    assert sample("schedkit_rejections_total", policy="reject-echoing", reason="tenant_quota") == 5
    other = sample("schedkit_rejections_total", policy="reject-echoing", reason="other")
    assert other == 1000 - MAX_REASON_LABELS
    assert len(scheduler.schedkit.rejections) <= MAX_KEPT_REASONS + 1
    assert reason_label("prompt of 300 tokens > 100") == "prompt of N tokens > N"
