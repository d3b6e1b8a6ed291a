"""vLLM V1 scheduler subclasses that consult the selected schedkit policies.

``--scheduler-cls schedkit_vllm.Scheduler`` (synchronous scheduling, the CPU default) or
``schedkit_vllm.AsyncScheduler`` (async scheduling, the GPU default). The policy comes
from ``additional_config["schedkit"]`` or a ``SCHEDKIT_CONFIG`` file, read when the
scheduler is built; without either, every override is a single ``None`` check and the
scheduler is stock vLLM.

How each hook reaches vLLM (vLLM's own code runs unchanged in every case):

- ``admit_request``: in ``add_request``. A rejected request is added and immediately
  finished as ``FINISHED_ABORTED``; the next ``update_from_output`` sends the client a
  final output with ``finish_reason="abort"`` and ``stop_reason="rejected: <reason>"``.
- ``order_waiting``: ``self.waiting`` becomes an ``OrderedRequestQueue`` (FCFS semantics,
  plus ``replace``) and is reordered before each step. ``kv_holding_waiting`` (requests
  that hold KV blocks, which vLLM always drains first) keeps vLLM's order.
- ``plan_batch``: ``max_num_scheduled_tokens``, ``max_num_active_reqs`` (admission into
  running) and ``long_prefill_token_threshold`` are set for one ``schedule()`` call and
  restored after it. A tighter ``max_running`` stops admissions; it does not preempt.
- ``select_victims``: vLLM's FCFS mode preempts ``running[-1]`` when a running request
  cannot get blocks; the adapter wraps this scheduler's ``allocate_slots`` and, on such a
  failure, moves the policy's next victim to the end of ``running`` (see
  ``SchedkitRuntime.place_next_victim``). vLLM's priority mode picks victims by
  ``max(priority, arrival)`` with no way to steer it, so a victim policy requires
  ``--scheduling-policy fcfs`` (schedkit's ``priority`` policy reproduces vLLM's).
- ``select_evictions``: see ``schedkit_vllm.eviction``.
- ``on_step_finished`` after ``update_from_output``; ``on_request_finished`` from
  ``_free_request``, the one place vLLM finishes every request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import vllm
from schedkit import PolicyFacade
from schedkit.errors import PolicyConfigError

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

from schedkit_vllm.config import resolve_config  # noqa: E402
from schedkit_vllm.runtime import SchedkitRuntime  # noqa: E402

if TYPE_CHECKING:
    _Base = Any
else:
    _Base = object

log = logging.getLogger("schedkit.vllm")

__all__ = ["AsyncScheduler", "OrderedRequestQueue", "SchedkitSchedulerMixin", "Scheduler"]

_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_REPETITION: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_IGNORED: "length",
    RequestStatus.FINISHED_ABORTED: "aborted",
    RequestStatus.FINISHED_ERROR: "aborted",
}


class OrderedRequestQueue(FCFSRequestQueue):  # type: ignore[misc]
    """vLLM's FCFS waiting queue whose order a policy may replace between steps."""

    def replace(self, requests: Iterable[Any]) -> None:
        self.clear()
        self.extend(requests)


class SchedkitSchedulerMixin(_Base):  # type: ignore[misc]
    """The overrides shared by ``Scheduler`` and ``AsyncScheduler``."""

    schedkit: SchedkitRuntime | None
    # vLLM's attributes this mixin reassigns (vLLM is typed Any here).
    waiting: Any
    max_num_scheduled_tokens: int
    max_num_active_reqs: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.schedkit = None
        super().__init__(*args, **kwargs)
        config = resolve_config(self.vllm_config.additional_config)
        if config is None:
            return
        facade = PolicyFacade.from_config(config)
        if facade.has_victims and self.policy == SchedulingPolicy.PRIORITY:
            raise PolicyConfigError(
                f"schedkit policy {facade.label!r} chooses preemption victims, which vLLM's"
                " --scheduling-policy priority does itself; use --scheduling-policy fcfs"
                " and add 'priority' to the schedkit policies for vLLM's priority order"
            )
        runtime = SchedkitRuntime(self, facade)
        if facade.has_order:
            queue = OrderedRequestQueue()
            queue.replace(self.waiting)
            self.waiting = queue
        if facade.has_victims:
            self._install_victim_hook(runtime)
        self.schedkit = runtime
        log.info(
            "schedkit: policies %s (hooks: %s)",
            facade.label,
            ", ".join(sorted(facade.implemented)) or "none",
        )

    def _install_victim_hook(self, runtime: SchedkitRuntime) -> None:
        manager = self.kv_cache_manager
        allocate = manager.allocate_slots
        running_status = RequestStatus.RUNNING

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = allocate(request, *args, **kwargs)
            # Only the running-request loop preempts after a failed allocation.
            if blocks is None and request.status == running_status:
                runtime.place_next_victim(request)
            return blocks

        manager.allocate_slots = allocate_slots

    def add_request(self, request: Any) -> None:
        runtime = self.schedkit
        if (
            runtime is None
            or not runtime.facade.has_admit
            or request.request_id in self.requests  # a streaming session's next chunk
        ):
            super().add_request(request)
            return
        reason = runtime.admission_reason(request)
        super().add_request(request)
        if reason is not None:
            self.finish_requests(request.request_id, RequestStatus.FINISHED_ABORTED)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        runtime = self.schedkit
        if runtime is None:
            return super().schedule(*args, **kwargs)
        budget = runtime.before_step()
        if budget is None:
            output = super().schedule(*args, **kwargs)
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
                output = super().schedule(*args, **kwargs)
            finally:
                (
                    self.max_num_scheduled_tokens,
                    self.max_num_active_reqs,
                    config.long_prefill_token_threshold,
                ) = saved
        runtime.after_schedule(output)
        return output

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        runtime = self.schedkit
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
        runtime.after_update()
        return outputs

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = super()._free_request(request, *args, **kwargs)
        runtime = self.schedkit
        if runtime is not None:
            runtime.request_freed(request, _FINISH_REASONS.get(request.status, "aborted"))
        return result


class Scheduler(SchedkitSchedulerMixin, _VllmScheduler):  # type: ignore[misc]
    """vLLM's V1 scheduler with schedkit policies (``--scheduler-cls schedkit_vllm.Scheduler``)."""


class AsyncScheduler(SchedkitSchedulerMixin, _VllmAsyncScheduler):  # type: ignore[misc]
    """vLLM's async scheduler with schedkit policies, for GPUs (async scheduling on)."""
