"""vLLM V1 scheduler subclasses that consult the selected schedkit policies.

``--scheduler-cls schedkit_vllm.Scheduler`` (synchronous scheduling, the CPU default) or
``schedkit_vllm.AsyncScheduler`` (async scheduling, the GPU default). The policy comes
from ``additional_config["schedkit"]`` or a ``SCHEDKIT_CONFIG`` file, read when the
scheduler is built; without either, every override is a single ``None`` check and the
scheduler is stock vLLM.

How each hook reaches vLLM (vLLM's own code runs unchanged in every case):

- ``on_request_arrived`` and ``admit_request``: in ``add_request``. A rejected request
  is added and immediately finished as ``FINISHED_ABORTED``; the next
  ``update_from_output`` sends the client a final output with ``finish_reason="abort"``
  and ``stop_reason="rejected: <reason>"``.
- ``order_waiting``: ``self.waiting`` becomes an ``OrderedRequestQueue`` (FCFS semantics,
  plus ``replace``) and is reordered before each step. ``kv_holding_waiting`` (requests
  that hold KV blocks, which vLLM always drains first) keeps vLLM's order. vLLM 0.34's
  ``async_kv_waiting`` (requests whose KV a connector may load asynchronously, with
  ``--max-num-inflight-kv-loads``) is ordered with ``waiting``, in one order: each queue
  holds its requests in the policy's order, and where vLLM picks between the two heads
  by arrival the adapter picks the one the policy puts first. Their loads start in that
  order, also while the batch is full (as in vLLM: a load takes no running slot).
- ``plan_batch``: ``max_num_scheduled_tokens``, ``max_num_active_reqs`` (admission into
  running) and ``long_prefill_token_threshold`` are set for one ``schedule()`` call and
  restored after it. A tighter ``max_running`` stops admissions; it does not preempt.
- ``select_victims``: when a running request cannot get blocks, vLLM preempts a victim
  inline in ``schedule()``. In a step where a running request may run out of blocks
  (the step's worst case exceeds the free blocks; otherwise nothing is wrapped), the
  adapter wraps the KV cache manager's ``allocate_slots`` for that step; on such a
  failure it asks the runtime for the policy's next victim and makes vLLM's own
  preemption code take it, wherever it sits in ``running``: a victim other than the
  needing request goes through vLLM's priority-mode branch (which unschedules a victim
  already scheduled this step and returns its tokens to the budget), with ``running``
  yielding only that victim to the branch's ``max()``; the needing request itself goes
  through the FCFS branch (moved to the end and popped), which ends the running loop on
  every supported vLLM, as the simulator does. When the policy's list runs out, the
  configured ``--scheduling-policy``'s default victim continues. A KV connector changes
  none of this, except where vLLM itself skips preemption: while the connector has
  pending block frees (``has_pending_block_frees()``), vLLM waits for them instead of
  preempting, and the policy is not asked.
- ``select_evictions``: see ``schedkit_vllm.eviction``; in vLLM's KV offload tier
  (``eviction_policy: SchedkitCachePolicy``), ``schedkit_vllm.offload``.
- ``on_step_finished`` after ``update_from_output`` of the step the report describes
  (keyed by its ``SchedulerOutput``: with async scheduling, one step late, never shifted);
  ``on_request_finished`` from ``_free_request``, the one place vLLM finishes every
  request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import vllm
from schedkit import PolicyFacade
from schedkit.capabilities import warn_unsupported
from schedkit.trust import TrustConfig

from schedkit_vllm.compat import check_version

check_version(vllm.__version__)

from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _VllmAsyncScheduler  # noqa: E402
from vllm.v1.core.sched.request_queue import (  # noqa: E402
    FCFSRequestQueue,
    SchedulingPolicy,
)
from vllm.v1.core.sched.scheduler import Scheduler as _VllmScheduler  # noqa: E402
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from schedkit_vllm import offload  # noqa: E402
from schedkit_vllm.config import resolve_config  # noqa: E402
from schedkit_vllm.runtime import VllmRuntime  # noqa: E402

if TYPE_CHECKING:
    _Base = Any
else:
    _Base = object

log = logging.getLogger("schedkit.vllm")

__all__ = [
    "AsyncScheduler",
    "OrderedRequestQueue",
    "SchedkitSchedulerMixin",
    "Scheduler",
    "SteeredRunning",
]

_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_REPETITION: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_IGNORED: "length",
    RequestStatus.FINISHED_ABORTED: "aborted",
    RequestStatus.FINISHED_ERROR: "aborted",
}


class SteeredRunning(list):  # type: ignore[type-arg]
    """vLLM's ``running`` list while the adapter steers a preemption: iterating it once
    yields only ``victim`` (vLLM's priority branch takes ``max(running, ...)``), then it
    is an ordinary list again. vLLM replaces ``running`` with a plain list when requests
    finish, so this costs nothing outside steps that preempt."""

    __slots__ = ("victim",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        super().__init__(items)
        self.victim: Any = None

    def __iter__(self) -> Iterator[Any]:
        victim = self.victim
        if victim is None:
            return super().__iter__()
        self.victim = None
        return iter((victim,))


class OrderedRequestQueue(FCFSRequestQueue):  # type: ignore[misc]
    """vLLM's FCFS waiting queue whose order a policy may replace between steps."""

    def replace(self, requests: Iterable[Any]) -> None:
        self.clear()
        self.extend(requests)


class SchedkitSchedulerMixin(_Base):  # type: ignore[misc]
    """The overrides shared by ``Scheduler`` and ``AsyncScheduler``."""

    # Class defaults too: vLLM's own tests build schedulers with object.__new__ and set
    # only the attributes they need; such a scheduler is stock vLLM.
    schedkit: VllmRuntime | None = None
    _live: VllmRuntime | None = None  # the runtime when its policies implement any hook
    # The KV offload tier's SchedkitCachePolicy objects vLLM built with this scheduler.
    offload_policies: tuple[offload.SchedkitCachePolicy, ...] = ()
    # vLLM's attributes this mixin reassigns (vLLM is typed Any here).
    waiting: Any
    async_kv_waiting: Any  # vLLM 0.34
    running: list[Any]
    policy: Any
    max_num_scheduled_tokens: int
    max_num_active_reqs: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.schedkit = None
        self._live = None
        with offload.collecting() as built:  # vLLM builds its KV connector in here
            super().__init__(*args, **kwargs)
        self.offload_policies = tuple(built)
        config = resolve_config(self.vllm_config.additional_config)
        if config is None:
            offload.require_config(self.offload_policies)
        else:
            self.install_schedkit(
                PolicyFacade.from_config(config), config.trust, record_steps=config.record_steps
            )

    def install_schedkit(
        self,
        facade: PolicyFacade,
        trust: TrustConfig | None = None,
        *,
        record_steps: str | None = None,
    ) -> VllmRuntime:
        """Put ``facade``'s policies in charge of this (so far stock) scheduler, before
        any request arrives. ``__init__`` does this from the config; drivers that build
        policy objects themselves (the contract suite) call it directly."""
        if self.schedkit is not None or self.requests:
            raise RuntimeError("install_schedkit: the scheduler already has policies or requests")
        warn_unsupported(facade, "vllm")
        runtime = VllmRuntime(self, facade, trust=trust, record_steps=record_steps)
        if facade.has_order:
            queue = OrderedRequestQueue()
            queue.replace(self.waiting)
            self.waiting = queue
            if hasattr(self, "async_kv_waiting"):  # vLLM 0.34: ordered with `waiting`
                loads = OrderedRequestQueue()
                loads.replace(self.async_kv_waiting)
                self.async_kv_waiting = loads
            # vLLM 0.34's --cache-aware-admission-window reorders the head of `waiting`
            # inside schedule(), after order_waiting: the policy owns the order (as on the
            # simulator, schedkit.sim.cadence)
            window: int = getattr(self, "cache_aware_window", 0)
            if window:
                log.warning(
                    "schedkit: --cache-aware-admission-window %d is off: the policy %s"
                    " orders the waiting queue",
                    window,
                    facade.label,
                )
                self.cache_aware_window = 0
        for policy in self.offload_policies:  # the KV offload tier asks the same policies
            pool = self.kv_cache_manager.block_pool
            policy.bind(
                facade, runtime.engine, hash_block_size=pool.hash_block_size, timed=runtime.timed
            )
            runtime.offload.append(policy)
        self.schedkit = runtime
        # A policy set with no hooks (the default fcfs) leaves every override on the
        # stock path: nothing would read what the runtime records.
        self._live = runtime if facade.implemented or runtime.recorder else None
        log.info(
            "schedkit: policies %s (hooks: %s)",
            facade.label,
            ", ".join(sorted(facade.implemented)) or "none",
        )
        return runtime

    def _victim_hook(self, runtime: VllmRuntime, allocate: Any) -> Any:
        """``allocate`` (a KV cache manager's ``allocate_slots``) wrapped to steer the
        preemption vLLM makes next after a running request's allocation fails."""
        running_status = RequestStatus.RUNNING
        configured = self.policy

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = allocate(request, *args, **kwargs)
            # Only the running-request loop preempts after a failed allocation, and
            # vLLM's next statements pick the victim, unless a KV connector's pending
            # block frees make vLLM wait instead (its own check, asked the same way).
            if blocks is None and request.status == running_status:
                connector = self.connector
                if connector is None or not connector.has_pending_block_frees():
                    self._steer_victim(runtime.next_victim(request), request, configured)
            return blocks

        return allocate_slots

    def _may_preempt(self) -> bool:
        """Whether a running request may fail to get blocks this step: the step's new
        tokens (at most the token budget) plus one partial block and the lookahead per
        running request, in every KV cache group, exceed the free blocks. Only then is
        the victim hook worth its call on every ``allocate_slots``."""
        groups = self.kv_cache_config.kv_cache_groups
        bs = min((int(g.kv_cache_spec.block_size) for g in groups), default=int(self.block_size))
        lookahead = -(-int(self.num_lookahead_tokens) // bs)
        need = -(-int(self.max_num_scheduled_tokens) // bs) + len(self.running) * (1 + lookahead)
        need *= max(1, len(groups))
        return bool(self.kv_cache_manager.block_pool.get_num_free_blocks() < need)

    def _steer_victim(self, victim: Any, needing: Any, configured: Any) -> None:
        """Make vLLM's preemption branch that runs next take ``victim``."""
        if victim is None:  # the configured policy's default
            self.policy = configured
            return
        running = self.running
        if victim is needing:
            # FCFS branch: pops running[-1] and, being the needing request, ends the loop.
            self.policy = SchedulingPolicy.FCFS
            if running[-1] is not needing:
                running.remove(needing)  # only unscheduled requests come after it
                running.append(needing)
            return
        # Priority branch: max(running) is the victim; vLLM unschedules it if needed.
        if type(running) is not SteeredRunning:
            running = self.running = SteeredRunning(running)
        running.victim = victim
        self.policy = SchedulingPolicy.PRIORITY

    def _next_waiting_queue(self, take_async_kv: bool) -> Any:
        """vLLM 0.34: ``waiting`` or ``async_kv_waiting``, whichever head the policy's
        order puts first (vLLM compares arrivals, or priorities in its priority mode)."""
        runtime = self._live
        rank = None if runtime is None else runtime.waiting_rank
        loads, waiting = self.async_kv_waiting, self.waiting
        if rank is None or not take_async_kv or not loads or not waiting:
            return super()._next_waiting_queue(take_async_kv)
        first = rank.get(loads.peek_request().request_id)
        other = rank.get(waiting.peek_request().request_id)
        if first is None or other is None:  # not in the order: vLLM's rule
            return super()._next_waiting_queue(take_async_kv)
        return loads if first < other else waiting

    def add_request(self, request: Any) -> None:
        runtime = self._live
        if (
            runtime is None
            or not runtime.facade.sees_arrivals
            or request.request_id in self.requests  # a streaming session's next chunk
        ):
            super().add_request(request)
            return
        reason = runtime.admit(request)
        super().add_request(request)
        if reason is not None:
            self.finish_requests(request.request_id, RequestStatus.FINISHED_ABORTED)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        runtime = self._live
        if runtime is None:
            return super().schedule(*args, **kwargs)
        budget = runtime.before_step()
        if budget is None:
            output = self._schedule_steered(args, kwargs)
        else:
            config = self.scheduler_config
            saved = (
                self.max_num_scheduled_tokens,
                self.max_num_active_reqs,
                config.long_prefill_token_threshold,
            )
            self.max_num_scheduled_tokens = budget.token_budget
            self.max_num_active_reqs = budget.max_running
            config.long_prefill_token_threshold = budget.prefill_chunk
            try:
                output = self._schedule_steered(args, kwargs)
            finally:
                (
                    self.max_num_scheduled_tokens,
                    self.max_num_active_reqs,
                    config.long_prefill_token_threshold,
                ) = saved
        runtime.after_schedule(output)
        return output

    def _schedule_steered(self, args: Any, kwargs: Any) -> Any:
        runtime = self._live
        if runtime is None or not runtime.facade.has_victims:
            return super().schedule(*args, **kwargs)
        if not self._may_preempt():  # the stock path: no wrapper call per request
            return super().schedule(*args, **kwargs)
        configured = self.policy
        # The manager of this step (whoever replaced it since), wrapped for the step only.
        manager = self.kv_cache_manager
        own = manager.__dict__.get("allocate_slots")
        manager.allocate_slots = self._victim_hook(runtime, manager.allocate_slots)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            if own is None:
                del manager.allocate_slots  # the manager's own method again
            else:
                manager.allocate_slots = own
            self.policy = configured
            running = self.running
            if type(running) is SteeredRunning:
                running.victim = None

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        runtime = self._live
        if runtime is None:
            return outputs
        for request, reason in runtime.take_rejections():
            final = EngineCoreOutput(
                request_id=request.request_id,
                new_token_ids=[],
                finish_reason=request.get_finished_reason(),
                stop_reason=f"rejected: {reason}",
                events=request.take_events(),
                trace_headers=request.trace_headers,
            )
            bundle = outputs.get(request.client_index)
            if bundle is None:
                outputs[request.client_index] = EngineCoreOutputs(outputs=[final])
            else:
                bundle.outputs.append(final)
        runtime.after_update(scheduler_output)
        return outputs

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            if self.schedkit is not None:
                self.schedkit.close()  # the step file, when recording

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = super()._free_request(request, *args, **kwargs)
        runtime = self._live
        if runtime is not None:
            runtime.request_freed(request, _FINISH_REASONS.get(request.status, "aborted"))
        return result


class Scheduler(SchedkitSchedulerMixin, _VllmScheduler):  # type: ignore[misc]
    """vLLM's V1 scheduler with schedkit policies (``--scheduler-cls schedkit_vllm.Scheduler``)."""


class AsyncScheduler(SchedkitSchedulerMixin, _VllmAsyncScheduler):  # type: ignore[misc]
    """vLLM's async scheduler with schedkit policies, for GPUs (async scheduling on)."""
