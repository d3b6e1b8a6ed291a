"""The per-scheduler glue between vLLM and the policy facade.

``VllmRuntime`` is the core kit's ``AdapterRuntime`` (facade, counters, metrics,
step ledger) plus what only vLLM needs: the view cache, rejected requests owed a final
output, the eviction hook and the victim plan. It never decides anything itself: every
decision comes from ``PolicyFacade``, and every default is vLLM's own behaviour. It is
built only when a schedkit config is present; without one the scheduler is stock vLLM.
"""

from __future__ import annotations

import heapq
import time
import warnings
from typing import Any, cast

from schedkit import BatchBudget, PolicyFacade, RequestView
from schedkit.adapter import REJECTED, AdapterRuntime
from schedkit.adapter.recording import StepRecorder
from schedkit.adapter.runtime import report_of
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig
from vllm.v1.core.sched.request_queue import SchedulingPolicy

from schedkit_vllm.eviction import EvictionHook
from schedkit_vllm.offload import SchedkitCachePolicy
from schedkit_vllm.views import VllmEngineView, VllmRequestView

__all__ = ["REJECTED", "VllmRuntime", "recording_meta"]


def recording_meta(scheduler: Any) -> dict[str, Any]:
    """What a step file says it recorded: vLLM, the model as vLLM names it, the device
    (a CUDA device's name, else ``cpu``) and TP."""
    config = scheduler.vllm_config
    device = "cpu"
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
    except Exception:  # pragma: no cover - no torch, or no driver
        pass
    return {
        "engine": "vllm",
        "model": str(config.model_config.model),
        "gpu": device,
        "tp": int(config.parallel_config.tensor_parallel_size),
    }


class VllmRuntime(AdapterRuntime):
    """What the schedkit scheduler subclass keeps in ``scheduler.schedkit``."""

    engine: VllmEngineView

    def __init__(
        self,
        scheduler: Any,
        facade: PolicyFacade,
        engine: VllmEngineView | None = None,
        trust: TrustConfig | None = None,
        record_steps: str | None = None,
    ) -> None:
        recorder = None
        if record_steps is not None:  # vLLM counts a step's tokens as computed at schedule
            # Every row flushed: a stopped server's engine core is killed before its
            # scheduler's shutdown closes the file (vLLM 0.32, SIGTERM), which lost the
            # last rows, all of them under 256 steps.
            recorder = StepRecorder(record_steps, recording_meta(scheduler), flush_every=1)
        super().__init__(facade, engine or VllmEngineView(scheduler), recorder)
        self.scheduler = scheduler
        self.trust = trust or DEFAULT_TRUST  # the scheduler-side bounds (schedkit.trust)
        self.seal = Seal.from_environ()  # set: only the edge's sealed metadata is trusted
        self.views: dict[str, VllmRequestView] = {}
        self._rejected: dict[str, str] = {}  # request id -> reason, until finished
        self._unreported: list[tuple[Any, str]] = []  # rejected requests owed an output
        self._victim_plan: tuple[int, str, list[Any]] | None = None  # (step, needing id, plan)
        self._step_started = 0.0
        # request id -> place in the policy's last order over both waiting queues, while
        # async_kv_waiting holds requests (else None: vLLM picks between the queues)
        self.waiting_rank: dict[str, int] | None = None
        self.eviction: EvictionHook | None = None
        self.offload: list[SchedkitCachePolicy] = []  # the KV offload tier's, when bound
        if facade.has_evictions:
            self.eviction = EvictionHook(scheduler.kv_cache_manager.block_pool, facade, self.engine)
            self.eviction.metrics = self.metrics

    @property
    def num_rejected(self) -> int:
        return sum(self.rejections.values())

    def view(self, request: Any) -> VllmRequestView:
        view = self.views.get(request.request_id)
        if view is None or view.request is not request:
            view = VllmRequestView(request, self.engine.epoch, self.trust, self.seal)
            self.views[request.request_id] = view
        return view

    # -- admission ------------------------------------------------------------------

    def admit(self, request: Any) -> str | None:
        """The rejection reason for a new request, or None to admit it."""
        reason = self.admission_reason(self.view(request))
        if reason is not None:
            self._rejected[request.request_id] = reason
            self._unreported.append((request, reason))
        return reason

    def take_rejections(self) -> list[tuple[Any, str]]:
        """Rejected requests whose final output has not been sent yet."""
        taken, self._unreported = self._unreported, []
        return taken

    # -- before and after each step ---------------------------------------------------

    def before_step(self) -> BatchBudget | None:
        """Reorder the waiting queue; return this step's budget when it differs."""
        scheduler = self.scheduler
        self.engine.step_index += 1
        self._step_started = self.engine.clock
        facade = self.facade
        if facade.has_order:
            self.order_waiting()
        if not facade.has_plan:
            return None
        default = BatchBudget(
            token_budget=int(scheduler.max_num_scheduled_tokens),
            max_running=int(scheduler.max_num_active_reqs),
            prefill_chunk=int(scheduler.scheduler_config.long_prefill_token_threshold),
        )
        started = time.perf_counter()
        budget = facade.plan_batch(self.engine, default)
        self.timed("plan_batch", started, budget != default)
        return None if budget == default else budget

    def order_waiting(self) -> None:
        """Put the waiting requests in the policy's order, one order over ``waiting`` and
        (vLLM 0.34, a KV connector with ``--max-num-inflight-kv-loads``)
        ``async_kv_waiting``, whose requests start their KV loads even while the batch is
        full. Each queue keeps its requests in the policy's order, and ``waiting_rank``
        lets the scheduler take the head the policy puts first where vLLM would compare
        arrivals. ``kv_holding_waiting`` (requests holding blocks) keeps vLLM's order."""
        scheduler = self.scheduler
        waiting = scheduler.waiting
        loads = getattr(scheduler, "async_kv_waiting", None)
        self.waiting_rank = None
        admits = waiting and len(scheduler.running) < scheduler.max_num_active_reqs
        if not admits and not loads:
            return
        if loads:  # the engine's order: vLLM's own merge of the two queues' heads
            requests = list(heapq.merge(waiting, loads, key=self._vllm_rank))
        else:
            requests = list(waiting)
        started = time.perf_counter()
        order = self.facade.order_waiting([self.view(r) for r in requests], self.engine)
        self.timed("order_waiting", started, order is not None)
        if order is None:
            return
        ordered = [cast(VllmRequestView, v).request for v in order]
        if not loads:
            waiting.replace(ordered)
            return
        loading = {id(r) for r in loads}
        waiting.replace([r for r in ordered if id(r) not in loading])
        loads.replace([r for r in ordered if id(r) in loading])
        self.waiting_rank = {r.request_id: i for i, r in enumerate(ordered)}

    def _vllm_rank(self, request: Any) -> tuple[int, float]:
        """What vLLM's ``_next_waiting_queue`` compares: arrival, after priority in its
        priority mode."""
        if self.scheduler.policy == SchedulingPolicy.PRIORITY:
            return (int(request.priority), float(request.arrival_time))
        return (0, float(request.arrival_time))

    def after_schedule(self, output: Any) -> None:
        """Record prefix-cache hits of admitted requests; open the step's report, keyed by
        the ``SchedulerOutput`` that ``update_from_output`` will receive back (with async
        scheduling that is one or more steps later)."""
        requests = self.scheduler.requests
        for new in output.scheduled_new_reqs:
            request = requests.get(new.req_id)
            if request is not None:
                self.view(request).admitted(int(new.num_computed_tokens))
        if not self.tracks_steps:
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
        report = report_of(scheduled, counts, prefill, decode, preempted)
        self.open_step(output, report, self._step_started)

    def after_update(self, scheduler_output: Any) -> None:
        """The results of the step ``scheduler_output`` describes were processed."""
        self.sync_metrics()
        eviction = self.eviction
        evicted = 0 if eviction is None else eviction.num_evicted_by_policy
        evicted += sum(policy.num_evicted_by_policy for policy in self.offload)
        if evicted != self.num_evicted_by_policy:  # GPU blocks and offloaded chunks
            self.evicted(evicted - self.num_evicted_by_policy)
        self.close_step(scheduler_output)

    # -- preemption -----------------------------------------------------------------

    def next_victim(self, needing: Any) -> Any | None:
        """The running request to preempt so that ``needing`` fits: the policy's next
        victim still running, or None for vLLM's default.

        The policy is asked once per (step, needing request); its list is consumed one
        victim per failed allocation, as the simulator consumes it. A victim may sit
        anywhere in ``running``: one vLLM already scheduled this step is unscheduled
        (its tokens go back to the budget), as vLLM does for its own priority victims.
        """
        running: list[Any] = self.scheduler.running
        plan_key = (self.engine.step_index, needing.request_id)
        if self._victim_plan is None or self._victim_plan[:2] != plan_key:
            views = [self.view(r) for r in running]
            started = time.perf_counter()
            chosen = self.facade.select_victims(views, self.view(needing), self.engine)
            self.timed("select_victims", started, chosen is not None)
            plan = [cast(VllmRequestView, v).request for v in chosen or ()]
            self._victim_plan = (plan_key[0], plan_key[1], plan)
        plan = self._victim_plan[2]
        present = {id(r) for r in running} if plan else set()
        while plan:
            victim = plan.pop(0)
            if id(victim) in present:  # else finished or preempted meanwhile
                self.victims_placed()
                return victim
            self.victims_skipped(1)
        return None

    # -- finishing ------------------------------------------------------------------

    def request_freed(self, request: Any, status_reason: str) -> None:
        reason = REJECTED if self._rejected.pop(request.request_id, None) else status_reason
        view = self.views.pop(request.request_id, None)
        if view is None or view.request is not request:
            view = VllmRequestView(request, self.engine.epoch, self.trust, self.seal)
        self.request_finished(view, reason)


def __getattr__(name: str) -> Any:
    """``SchedkitRuntime``, renamed ``VllmRuntime`` (issue #36): each adapter's runtime is
    named after its engine."""
    if name == "SchedkitRuntime":
        warnings.warn(
            f"{__name__}.SchedkitRuntime is now VllmRuntime; use the new name (the old one"
            " goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return VllmRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
