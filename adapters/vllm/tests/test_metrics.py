"""schedkit's Prometheus metrics, counted by the real vLLM scheduler (no model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import make_request, run_until_idle
from prometheus_client import REGISTRY
from schedkit import Admission, EngineView, Policy, RequestView, hookimpl


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
