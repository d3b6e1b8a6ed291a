"""The TensorRT-LLM seam (schedkit_trtllm.SchedkitRequestScheduler) with stand-ins for
``LlmRequest`` and ``SimpleScheduler``: these tests never import tensorrt_llm."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pytest
from schedkit import Admission, Policy, PolicyFacade, RequestView, hookimpl

from schedkit_trtllm import SchedkitRequestScheduler, install


class State(Enum):  # the names of tensorrt_llm.bindings.LlmRequestState
    CONTEXT_INIT = 0
    GENERATION_IN_PROGRESS = 1


@dataclass
class Req:
    request_id: int
    orig_prompt_len: int
    state: State = State.CONTEXT_INIT
    context_current_position: int = 0
    max_new_tokens: int = 8
    py_schedkit_tenant: str = "default"


@dataclass
class MicroBatch:
    max_num_tokens: int = 8192
    max_batch_size: int = 64


@dataclass
class Inner:
    """Records what it was asked to schedule, and with which limits."""

    micro_batch_scheduler: MicroBatch = field(default_factory=MicroBatch)
    calls: list[tuple[list[int], int, int]] = field(default_factory=list)

    def schedule_request(self, active: list[Req], inflight: set[int]) -> tuple[list[Req], ...]:
        mb = self.micro_batch_scheduler
        self.calls.append(([r.request_id for r in active], mb.max_num_tokens, mb.max_batch_size))
        return active, [], []

    def can_schedule(self, requests: list[Req]) -> bool:
        return True


def active() -> list[Req]:
    return [
        Req(1, 900, State.GENERATION_IN_PROGRESS, 900),  # running: keeps its place
        Req(2, 500),
        Req(3, 100, py_schedkit_tenant="blocked"),
        Req(4, 300),
    ]


def test_waiting_requests_are_ordered_by_the_policy_after_the_running_ones() -> None:
    inner = Inner()
    wrapper = SchedkitRequestScheduler(inner, PolicyFacade.from_config("shortest-prompt"))
    wrapper.schedule_request(active(), set())
    assert inner.calls[0][0] == [1, 3, 4, 2]  # shortest prompt first among the waiting
    stock = Inner()
    SchedkitRequestScheduler(stock, PolicyFacade.from_config("fcfs")).schedule_request(
        active(), set()
    )
    assert stock.calls[0][0] == [1, 2, 3, 4]  # no policy: TensorRT-LLM's order


class BlockTenant(Policy):
    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        return Admission.reject("tenant blocked") if request.tenant == "blocked" else None


def test_a_rejected_request_is_never_scheduled_and_is_handed_to_the_executor() -> None:
    inner = Inner()
    wrapper = SchedkitRequestScheduler(inner, PolicyFacade([("block", BlockTenant())]))
    requests = active()
    wrapper.schedule_request(requests, set())
    wrapper.schedule_request(requests, set())  # asked once per request, not per step
    assert [ids for ids, _, _ in inner.calls] == [[1, 2, 4], [1, 2, 4]]
    assert wrapper.take_rejected() == {3: "tenant blocked"}
    assert wrapper.take_rejected() == {}


class Budget(Policy):
    @hookimpl
    def plan_batch(self, engine: Any, default: Any) -> Any:
        return type(default)(token_budget=256, max_running=2)


def test_the_batch_budget_holds_for_one_call_only() -> None:
    inner = Inner()
    wrapper = SchedkitRequestScheduler(inner, PolicyFacade([("budget", Budget())]))
    wrapper.schedule_request(active(), set())
    assert inner.calls[0][1:] == (256, 2)
    assert (inner.micro_batch_scheduler.max_num_tokens,
            inner.micro_batch_scheduler.max_batch_size) == (8192, 64)  # fmt: skip


def test_install_needs_tensorrt_llm_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # as where it is not installed

    class Executor:
        scheduler = Inner()

    with pytest.raises(ImportError, match="install tensorrt_llm"):
        install(Executor(), PolicyFacade.from_config("fcfs"))
    assert isinstance(Executor.scheduler, Inner)  # untouched
