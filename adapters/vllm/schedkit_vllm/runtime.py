"""The per-scheduler glue between vLLM and the policy facade.

``SchedkitRuntime`` holds the facade, the view caches and the counters, and does the
work each scheduler override delegates to it. It never decides anything itself: every
decision comes from ``PolicyFacade``, and every default is vLLM's own behaviour. It is
built only when a schedkit config is present; without one the scheduler is stock vLLM.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from schedkit import BatchBudget, PolicyFacade, RequestView, StepReport
from schedkit.decisions import ADMIT

from schedkit_vllm.eviction import EvictionHook
from schedkit_vllm.metrics import SchedkitMetrics, try_create
from schedkit_vllm.views import VllmEngineView, VllmRequestView

log = logging.getLogger("schedkit.vllm")

REJECTED = "rejected"


@dataclass(slots=True)
class _PendingStep:
    started: float
    report: StepReport | None


class SchedkitRuntime:
    """What the schedkit scheduler subclass keeps in ``scheduler.schedkit``."""

    def __init__(self, scheduler: Any, facade: PolicyFacade) -> None:
        self.scheduler = scheduler
        self.facade = facade
        self.engine = VllmEngineView(scheduler)
        self.views: dict[str, VllmRequestView] = {}
        self.rejections: Counter[str] = Counter()  # by reason
        self.finished: Counter[str] = Counter()  # by schedkit finish reason
        self.num_victims_placed = 0
        self.num_victims_skipped = 0  # named by the policy but already scheduled this step
        self._rejected: dict[str, str] = {}  # request id -> reason, until finished
        self._unreported: list[tuple[Any, str]] = []  # rejected requests owed an output
        self._victim_plan: tuple[int, str, list[Any]] | None = None  # (step, needing id, plan)
        self._pending: _PendingStep | None = None
        self.metrics: SchedkitMetrics | None = try_create(facade.label, facade.implemented)
        self._errors_seen = 0
        self._evicted_seen = 0
        self.eviction: EvictionHook | None = None
        if facade.has_evictions:
            self.eviction = EvictionHook(scheduler.kv_cache_manager.block_pool, facade, self.engine)
            self.eviction.metrics = self.metrics

    @property
    def num_rejected(self) -> int:
        return sum(self.rejections.values())

    @property
    def policy_errors(self) -> int:
        return int(self.facade.error_count)

    def view(self, request: Any) -> VllmRequestView:
        view = self.views.get(request.request_id)
        if view is None or view.request is not request:
            view = VllmRequestView(request, self.engine.epoch)
            self.views[request.request_id] = view
        return view

    # -- admission ------------------------------------------------------------------

    def admission_reason(self, request: Any) -> str | None:
        """The rejection reason for a new request, or None to admit it."""
        metrics = self.metrics
        started = time.perf_counter()
        decision = self.facade.admit(self.view(request), self.engine)
        if metrics is not None:
            metrics.hook("admit_request", time.perf_counter() - started, decision is not ADMIT)
        if decision.admitted:
            return None
        self.rejections[decision.reason] += 1
        if metrics is not None:
            metrics.rejection(str(decision.reason))
        self._rejected[request.request_id] = decision.reason
        self._unreported.append((request, decision.reason))
        log.info("schedkit: rejected request %s: %s", request.request_id, decision.reason)
        return str(decision.reason)

    def take_rejections(self) -> list[tuple[Any, str]]:
        """Rejected requests whose final output has not been sent yet."""
        taken, self._unreported = self._unreported, []
        return taken

    # -- before and after each step ---------------------------------------------------

    def before_step(self) -> BatchBudget | None:
        """Reorder the waiting queue; return this step's budget when it differs."""
        scheduler = self.scheduler
        self.engine.step_index += 1
        facade = self.facade
        if facade.has_step_observer:
            self._pending = _PendingStep(time.perf_counter(), None)
        waiting = scheduler.waiting
        if facade.has_order and waiting and len(scheduler.running) < scheduler.max_num_active_reqs:
            requests = list(waiting)
            started = time.perf_counter()
            order = facade.order_waiting([self.view(r) for r in requests], self.engine)
            if self.metrics is not None:
                self.metrics.hook("order_waiting", time.perf_counter() - started, order is not None)
            if order is not None:
                waiting.replace([cast(VllmRequestView, v).request for v in order])
        if not facade.has_plan:
            return None
        default = BatchBudget(
            token_budget=int(scheduler.max_num_scheduled_tokens),
            max_running=int(scheduler.max_num_active_reqs),
            prefill_chunk=int(scheduler.scheduler_config.long_prefill_token_threshold),
        )
        started = time.perf_counter()
        budget = facade.plan_batch(self.engine, default)
        if self.metrics is not None:
            self.metrics.hook("plan_batch", time.perf_counter() - started, budget != default)
        return None if budget == default else budget

    def after_schedule(self, output: Any) -> None:
        """Record prefix-cache hits of admitted requests; start the step report."""
        requests = self.scheduler.requests
        for new in output.scheduled_new_reqs:
            request = requests.get(new.req_id)
            if request is not None:
                self.view(request).num_cached_tokens = int(new.num_computed_tokens)
        pending = self._pending
        if pending is None:
            return
        scheduled: list[RequestView] = []
        counts: list[int] = []
        prefill = decode = 0
        for req_id, tokens in output.num_scheduled_tokens.items():
            request = requests.get(req_id)
            if request is None:
                continue
            scheduled.append(self.view(request))
            counts.append(tokens)
            # num_computed_tokens already includes this step's tokens.
            if request.num_computed_tokens - tokens >= request.num_prompt_tokens:
                decode += tokens
            else:
                prefill += tokens
        preempted = [
            self.view(requests[rid]) for rid in output.preempted_req_ids if rid in requests
        ]
        pending.report = StepReport(
            num_steps=1,
            duration_s=0.0,
            num_prefill_tokens=prefill,
            num_decode_tokens=decode,
            scheduled=scheduled,
            num_scheduled_tokens=counts,
            preempted=preempted,
        )

    def after_update(self) -> None:
        metrics = self.metrics
        if metrics is not None:
            self._sync_metrics(metrics)
        pending, self._pending = self._pending, None
        if pending is None or pending.report is None:
            return
        started = time.perf_counter()
        pending.report.duration_s = started - pending.started
        self.facade.step_finished(pending.report, self.engine)
        if metrics is not None:
            metrics.hook("on_step_finished", time.perf_counter() - started, False)

    def _sync_metrics(self, metrics: SchedkitMetrics) -> None:
        """Counts kept elsewhere: the facade's errors, the eviction hook's evictions."""
        facade = self.facade
        if facade.errors and facade.error_count != self._errors_seen:
            self._errors_seen = facade.error_count
            metrics.sync_errors(facade.errors)
        eviction = self.eviction
        if eviction is not None and eviction.num_evicted_by_policy != self._evicted_seen:
            metrics.evicted(eviction.num_evicted_by_policy - self._evicted_seen)
            self._evicted_seen = eviction.num_evicted_by_policy

    # -- preemption -----------------------------------------------------------------

    def place_next_victim(self, needing: Any) -> None:
        """vLLM (FCFS mode) is about to preempt ``running[-1]`` so that ``needing`` fits:
        move the policy's next victim there.

        vLLM walks ``running`` front to back, so requests before ``needing`` already
        hold tokens of this step; only ``needing`` and the requests after it can be
        preempted without undoing that. Victims the policy names among the earlier ones
        are skipped (and counted); when the policy's list runs out, vLLM's default
        (the last request in ``running``) continues.
        """
        running: list[Any] = self.scheduler.running
        step = self.engine.step_index
        plan_key = (step, needing.request_id)
        if self._victim_plan is None or self._victim_plan[:2] != plan_key:
            views = [self.view(r) for r in running]
            started = time.perf_counter()
            chosen = self.facade.select_victims(views, self.view(needing), self.engine)
            metrics = self.metrics
            if metrics is not None:
                metrics.hook("select_victims", time.perf_counter() - started, chosen is not None)
            plan: list[Any] = []
            if chosen is not None:
                index = _index(running, needing)
                later = {id(r) for r in running[index + 1 :]}
                for victim in chosen:
                    request = cast(VllmRequestView, victim).request
                    if request is needing:
                        plan.append(request)
                        break  # preempting `needing` ends the search
                    if id(request) in later:
                        plan.append(request)
                    else:
                        self.num_victims_skipped += 1
                        if metrics is not None:
                            metrics.victims_skipped(1)
            self._victim_plan = (step, needing.request_id, plan)
        plan = self._victim_plan[2]
        while plan:
            victim = plan.pop(0)
            position = _index(running, victim)
            if position < 0:  # finished or preempted meanwhile
                continue
            if position != len(running) - 1:
                # Only `needing` and later requests are moved, and moving `needing`
                # happens only when vLLM is about to preempt it and leave the loop.
                del running[position]
                running.append(victim)
            self.num_victims_placed += 1
            if self.metrics is not None:
                self.metrics.victim_placed()
            return

    # -- finishing ------------------------------------------------------------------

    def request_freed(self, request: Any, status_reason: str) -> None:
        reason = REJECTED if self._rejected.pop(request.request_id, None) else status_reason
        self.finished[reason] += 1
        if self.facade.has_finish_observer:
            started = time.perf_counter()
            self.facade.request_finished(self.view(request), reason, self.engine)
            if self.metrics is not None:
                self.metrics.hook("on_request_finished", time.perf_counter() - started, False)
        self.views.pop(request.request_id, None)


def _index(running: list[Any], request: Any) -> int:
    for position, item in enumerate(running):
        if item is request:
            return position
    return -1
