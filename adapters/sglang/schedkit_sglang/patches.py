"""How each schedkit hook reaches SGLang's scheduler, through SGLang's ``HookRegistry``.

Registered by ``schedkit_sglang.plugin.load`` only when a schedkit config is selected,
and then only for the hooks the selected policies implement (the default ``fcfs``
implements none: only ``__init__`` is patched, and no step pays anything); SGLang's own
code runs unchanged around them.

- Every process: ``Scheduler.__init__`` builds the ``SglangRuntime`` (after SGLang's
  own init; a bad config stops the scheduler before the model loads) and logs a warning
  for each hook the policies use that SGLang honours only in part
  (``schedkit.capabilities``).
- ``admit_request`` and ``on_request_arrived``: ``Scheduler._add_request_to_queue``,
  the first time a request reaches the waiting queue (not when a retracted request goes
  back): every new request goes through ``PolicyFacade.admit``, which tells the arrival
  observers and asks the admission policies. A rejected request is answered as SGLang
  answers a full queue: ``finish_reason`` ``{"type": "abort", "message":
  "rejected: <reason>", "status_code": 503}``.
- ``order_waiting``: replaces ``SchedulePolicy.calc_priority`` (``--schedule-policy``,
  including lpm's silent FCFS above 128 waiting requests, and the priority sort of
  ``--enable-priority-scheduling``). The waiting queue is reordered in place.
- ``plan_batch``: for one ``_get_new_batch_prefill_raw`` call, ``max_prefill_tokens``
  (token budget) and ``chunked_prefill_size`` (prefill chunk) are set on the scheduler
  and restored after it, and ``get_num_allocatable_reqs`` stops admissions beyond
  ``max_running``.
- ``select_victims``: decode retraction (``ScheduleBatch._get_decode_retraction_order``:
  the policy's victims are retracted first, then SGLang's order continues) and, with
  ``--enable-priority-scheduling``, the prefill adder's priority preemption
  (``PrefillAdder.preempt_to_schedule``: the policy orders the candidates, SGLang's
  priority threshold still decides who may be preempted). A step observer alone wraps
  ``retract_decode`` and ``preempt_to_schedule`` too, changing nothing, so that reports
  name the requests SGLang preempted.
- ``select_evictions``: the ``schedkit`` radix-cache backend, see
  ``schedkit_sglang.eviction``.
- ``on_step_finished`` and ``record_steps``: a batch's report is taken when
  ``Scheduler.run_batch`` launches it and given to the policies (and the step file)
  after ``Scheduler.process_batch_result`` processed that batch's results (keyed by the
  result object ``run_batch`` returned, so SGLang's overlap loop, which processes step N
  after launching step N+1, reports each step once and as its own);
  ``on_request_finished``: when the output streamer sends a finished request, or SGLang
  sends an abort.
- Counters: ``Scheduler.get_internal_state`` adds ``schedkit`` (policy errors by hook,
  steps, rejections) to SGLang's internal state, which ``Engine.get_server_info()`` and
  ``/server_info`` return; ``schedkit bench --engine sglang`` reads it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from schedkit import PolicyFacade
from schedkit.capabilities import warn_unsupported
from schedkit.errors import PolicyConfigError
from schedkit.trust import TrustConfig

from schedkit_sglang import runtime as _runtime
from schedkit_sglang.runtime import REJECTED, SglangRuntime

log = logging.getLogger("schedkit.sglang")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
POLICY = "sglang.srt.managers.schedule_policy.SchedulePolicy"
ADDER = "sglang.srt.managers.schedule_policy.PrefillAdder"
BATCH = "sglang.srt.managers.schedule_batch.ScheduleBatch"
STREAMER = "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer"
PREALLOC = "sglang.srt.disaggregation.decode.DecodePreallocQueue"
# The event loops of --disaggregation-mode prefill and decode form batches here, not in
# get_next_batch_to_run: a step starts in whichever the server's loop calls.
NEXT_BATCH = (
    "get_next_batch_to_run",
    "get_next_disagg_prefill_batch_to_run",
    "get_next_disagg_decode_batch_to_run",
)


def _active() -> SglangRuntime | None:
    return _runtime.ACTIVE


def plan(
    facade: PolicyFacade,
    timing: bool = False,
    trust: TrustConfig | None = None,
    record_steps: str | None = None,
) -> dict[str, tuple[Callable[..., Any], str]]:
    """The patches ``facade`` needs: dotted target -> (hook, HookType name). ``timing``:
    also mark every request so SGLang returns its time stats (for the bench); ``trust``:
    the scheduler-side bounds on request metadata (``schedkit.trust``); ``record_steps``:
    a CSV file for one row per step (``schedkit.adapter.recording``)."""
    patches: dict[str, tuple[Callable[..., Any], str]] = {
        f"{SCHEDULER}.__init__": (_make_init(facade, timing, trust, record_steps), "AROUND"),
    }
    if facade.implemented or record_steps:  # step index and reports; none for plain fcfs
        for name in NEXT_BATCH:
            patches[f"{SCHEDULER}.{name}"] = (_next_batch, "AROUND")
        patches[f"{SCHEDULER}.run_batch"] = (_run_batch, "AROUND")
        patches[f"{SCHEDULER}.process_batch_result"] = (_batch_result, "AROUND")
    if facade.implemented or timing:  # counters for /server_info and the bench
        patches[f"{SCHEDULER}.get_internal_state"] = (_internal_state, "AROUND")
    if facade.has_finish_observer:
        patches[f"{STREAMER}.stream_output"] = (_stream_output, "AROUND")
        patches[f"{SCHEDULER}.send_abort_output"] = (_abort_output, "AROUND")
    if facade.sees_arrivals or timing:
        patches[f"{SCHEDULER}._add_request_to_queue"] = (_add_request, "AROUND")
    if facade.has_order:
        patches[f"{POLICY}.calc_priority"] = (_calc_priority, "AROUND")
        patches[f"{PREALLOC}.pop_preallocated"] = (_preallocation_order, "AROUND")
    if facade.has_plan:
        patches[f"{SCHEDULER}._get_new_batch_prefill_raw"] = (_prefill_raw, "AROUND")
        patches[f"{SCHEDULER}.get_num_allocatable_reqs"] = (_allocatable, "AROUND")
    if facade.has_victims:
        patches[f"{BATCH}._get_decode_retraction_order"] = (_retraction_order, "AROUND")
    if facade.has_victims or facade.has_step_observer:  # reports name the preempted
        patches[f"{BATCH}.retract_decode"] = (_retract_decode, "AROUND")
        patches[f"{ADDER}.preempt_to_schedule"] = (_preempt_to_schedule, "AROUND")
    return patches


def _make_init(
    facade: PolicyFacade,
    timing: bool,
    trust: TrustConfig | None = None,
    record_steps: str | None = None,
) -> Callable[..., Any]:
    def init(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> None:
        self.schedkit = None
        original(self, *args, **kwargs)
        if (
            facade.has_victims
            and self.enable_priority_scheduling
            and not self.schedule_low_priority_values_first
        ):
            raise PolicyConfigError(
                f"schedkit policy {facade.label!r} chooses preemption victims, and"
                " --enable-priority-scheduling preempts by SGLang's priority threshold with"
                " higher values first; add --schedule-low-priority-values-first so both"
                " agree that lower values come first, as schedkit's 'priority' does"
            )
        runtime = SglangRuntime(self, facade, trust, record_steps)
        runtime.timing = timing
        self.schedkit = runtime
        _runtime.ACTIVE = runtime
        log.info(
            "schedkit: policies %s (hooks: %s)",
            facade.label,
            ", ".join(sorted(facade.implemented)) or "none",
        )
        warn_unsupported(facade, "sglang")
        _warn_decode_cache(self, facade)

    return init


def _warn_decode_cache(scheduler: Any, facade: PolicyFacade) -> None:
    """A decode server of a disaggregated pair runs without a radix cache unless told
    (``--disaggregation-decode-enable-radix-cache``): nothing to evict, so the policy's
    eviction hooks never run there; say so once at start."""
    args = getattr(scheduler, "server_args", None)
    if (
        facade.has_evictions
        and getattr(args, "disaggregation_mode", None) == "decode"
        and getattr(args, "disable_radix_cache", False)
    ):
        log.warning(
            "schedkit: policy %s chooses KV evictions, but this SGLang decode server runs"
            " without a radix cache (SGLang's default in --disaggregation-mode decode):"
            " select_evictions/eviction_key never run here; add"
            " --disaggregation-decode-enable-radix-cache to cache (and evict) on decode",
            facade.label,
        )


# -- admission ----------------------------------------------------------------------


def _add_request(
    original: Callable[..., Any], self: Any, req: Any, is_retracted: bool = False
) -> Any:
    runtime: SglangRuntime | None = self.schedkit
    if runtime is None or is_retracted or getattr(req, "_schedkit_admitted", False):
        return original(self, req, is_retracted)
    req._schedkit_admitted = True
    if runtime.timing:
        req.time_stats.has_timing_data = True
    if not runtime.facade.sees_arrivals:
        _trace_admission(req, runtime, None)
        return original(self, req, is_retracted)
    reason = runtime.admission_reason(runtime.view(req))
    _trace_admission(req, runtime, reason)
    if reason is None:
        return original(self, req, is_retracted)
    # As SGLang's own _abort_on_queued_limit answers a full queue.
    from sglang.srt.managers.scheduler import _make_abort_req

    message = f"{REJECTED}: {reason}"
    finished = {"type": "abort", "status_code": HTTPStatus.SERVICE_UNAVAILABLE, "message": message}
    runtime.finish(req, REJECTED)
    self.send_abort_output(_make_abort_req(req, finished_reason=finished), req)
    req.time_stats.trace_ctx.abort(abort_info={"reason": message})
    self._release_aborted_request(req)
    return None


def _trace_admission(req: Any, runtime: SglangRuntime, reason: str | None) -> None:
    """The admission decision on the request's scheduler span, when SGLang traces
    requests (``--enable-trace``): ``schedkit.policy``, ``schedkit.rejected`` and the
    reason, ``schedkit.rejection`` (``docs/observability.md``)."""
    trace = getattr(getattr(req, "time_stats", None), "trace_ctx", None)
    if trace is None or not getattr(trace, "tracing_enable", False):
        return
    attributes: dict[str, Any] = {
        "schedkit.policy": runtime.facade.label,
        "schedkit.rejected": reason is not None,
    }
    if reason is not None:
        attributes["schedkit.rejection"] = reason
    trace.trace_set_thread_attrs(attributes)


# -- order and budget -----------------------------------------------------------------


def _calc_priority(
    original: Callable[..., Any],
    self: Any,
    waiting_queue: list[Any],
    *args: Any,
    **kwargs: Any,
) -> None:
    runtime = _active()
    if runtime is None:
        original(self, waiting_queue, *args, **kwargs)
        return
    runtime.order(waiting_queue)


def _preallocation_order(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """A decode server's pre-allocation queue in the policy's order: who gets KV space
    (and so a transfer) first, as the simulator's decode instances order it. SGLang sorts
    this queue only with ``--enable-priority-scheduling``, by priority; with a schedkit
    order the policy's order is the order (its own priority rules included)."""
    scheduler = self.scheduler
    runtime: SglangRuntime | None = getattr(scheduler, "schedkit", None)
    if runtime is None or not self.queue:
        return original(self, *args, **kwargs)
    reqs = [pending.req for pending in self.queue]
    runtime.order(reqs)
    pending_of = {id(pending.req): pending for pending in self.queue}
    self.queue[:] = [pending_of[id(req)] for req in reqs]
    saved = scheduler.enable_priority_scheduling
    scheduler.enable_priority_scheduling = False  # SGLang's sort would undo the order
    try:
        return original(self, *args, **kwargs)
    finally:
        scheduler.enable_priority_scheduling = saved


def _prefill_raw(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    runtime: SglangRuntime | None = self.schedkit
    budget = runtime.plan() if runtime is not None and self.waiting_queue else None
    if runtime is None or budget is None:
        return original(self, *args, **kwargs)
    saved = (self.max_prefill_tokens, self.chunked_prefill_size)
    self.max_prefill_tokens = budget.token_budget
    if budget.prefill_chunk:
        self.chunked_prefill_size = budget.prefill_chunk
    runtime.budget = budget
    try:
        return original(self, *args, **kwargs)
    finally:
        self.max_prefill_tokens, self.chunked_prefill_size = saved
        runtime.budget = None


def _allocatable(
    original: Callable[..., Any], self: Any, running_bs: int, *args: Any, **kwargs: Any
) -> int:
    result: int = original(self, running_bs, *args, **kwargs)
    runtime: SglangRuntime | None = self.schedkit
    if runtime is None or runtime.budget is None:
        return result
    return min(result, runtime.budget.max_running - running_bs)


# -- preemption -----------------------------------------------------------------------


def _retraction_order(original: Callable[..., Any], reqs: list[Any]) -> list[int]:
    default: list[int] = original(reqs)
    runtime = _active()
    if runtime is None or len(reqs) < 2:
        return default
    return runtime.retraction_order(reqs, default)


def _retract_decode(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(self, *args, **kwargs)
    runtime = _active()
    if runtime is not None:
        runtime.preempted(result[0])
    return result


def _preempt_to_schedule(original: Callable[..., Any], self: Any, req: Any) -> bool:
    """SGLang's ``PrefillAdder.preempt_to_schedule`` with the policy's victim order.

    The same steps as SGLang's: candidates are running requests not already preempted
    nor finished; only those ``priority_scheduling_preemption_threshold`` below ``req``
    may go; preemption happens only if they free enough tokens for ``req``.
    """
    runtime = _active()
    if runtime is None:
        return bool(original(self, req))
    valid = [r for r in self.running_batch.reqs if r not in self.preempt_list and not r.finished()]
    chosen = runtime.victims(valid, req) if valid and runtime.facade.has_victims else None
    if chosen is None:  # SGLang's own choice, noted for the step report
        before = len(self.preempt_list)
        preempted = bool(original(self, req))
        if preempted:
            runtime.preempted(self.preempt_list[before:], set())
        return preempted
    from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS

    # schedkit's priority: lower values first (the init check makes SGLang agree).
    threshold = self.priority_scheduling_preemption_threshold
    need = (
        len(req.full_untruncated_fill_ids)
        - req.prefix_len
        + min(req.sampling_params.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        + self._request_slot_reserve_for_req(req)
        - self.rem_total_tokens
    )
    victims = []
    priority = runtime.priority  # the policies' scale, and SGLang's (see unset_priority)
    for running in chosen:
        if running is req or priority(running) - priority(req) <= threshold:
            continue
        victims.append(running)
        need -= self._get_running_request_total_token_offset(running)
        if need <= 0:
            break
    if not victims or need > 0:
        return False
    chosen_ids = {id(r) for r in victims}
    batch = self.running_batch
    keep = []
    released = 0
    for i, running in enumerate(batch.reqs):
        if id(running) in chosen_ids:
            self.memory_budget.total_offset -= self._get_running_request_total_token_offset(running)
            released += 1
            batch.release_req(i, len(batch.reqs) - released)
        else:
            keep.append(i)
    batch.filter_batch(keep_indices=keep)
    self.preempt_list.extend(victims)
    runtime.preempted(victims, chosen_ids)
    return True


# -- observation ----------------------------------------------------------------------


def _next_batch(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    runtime: SglangRuntime | None = self.schedkit
    if runtime is not None:
        runtime.step_started()
    return original(self, *args, **kwargs)


def _observe(runtime: SglangRuntime, what: Callable[[], None]) -> None:
    """Run an observation step; a failure there is logged, never raised into SGLang's
    loop (which would stop the server). Policy errors never get here: the facade
    isolates them."""
    try:
        what()
    except Exception:
        runtime.observer_errors += 1
        if runtime.observer_errors == 1:
            log.exception("schedkit: observing the scheduler failed (logged once)")


def _run_batch(
    original: Callable[..., Any], self: Any, batch: Any, *args: Any, **kwargs: Any
) -> Any:
    result = original(self, batch, *args, **kwargs)
    runtime: SglangRuntime | None = self.schedkit
    if runtime is not None:
        _observe(runtime, lambda: runtime.batch_launched(batch, result))
    return result


def _batch_result(
    original: Callable[..., Any], self: Any, batch: Any, result: Any, *args: Any, **kwargs: Any
) -> Any:
    out = original(self, batch, result, *args, **kwargs)
    runtime: SglangRuntime | None = self.schedkit
    if runtime is not None:
        _observe(runtime, lambda: runtime.step_finished(result, batch))
    return out


def _internal_state(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    output = original(self, *args, **kwargs)
    runtime: SglangRuntime | None = self.schedkit
    state = getattr(output, "internal_state", None)
    if runtime is not None and isinstance(state, dict):
        state["schedkit"] = runtime.internal_state()
    return output


def _stream_output(
    original: Callable[..., Any], self: Any, reqs: list[Any], *args: Any, **kwargs: Any
) -> Any:
    result = original(self, reqs, *args, **kwargs)
    runtime = _active()
    if runtime is not None:
        for req in reqs:
            if req.finished():
                _observe(runtime, functools.partial(runtime.finish, req))
    return result


def _abort_output(
    original: Callable[..., Any], self: Any, abort_req: Any, req: Any, *args: Any, **kwargs: Any
) -> Any:
    result = original(self, abort_req, req, *args, **kwargs)
    runtime: SglangRuntime | None = self.schedkit
    if runtime is not None:
        _observe(runtime, lambda: runtime.finish(req, "aborted"))
    return result
