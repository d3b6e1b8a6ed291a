"""The per-scheduler glue between SGLang and the policy facade.

``SglangRuntime`` is the core kit's ``AdapterRuntime`` (facade, counters, metrics,
step ledger, finish bookkeeping) plus what only SGLang needs: views that ride on
SGLang's ``Req``, the waiting-queue order, the prefill budget, retraction and preemption
victims, eviction ranks and the batch index. Each patched SGLang method delegates to it
(see ``schedkit_sglang.patches``). It never decides anything itself: every decision comes
from ``PolicyFacade``, and every default is SGLang's own behaviour. One runtime per
scheduler process (SGLang runs one scheduler per process), reachable as
``runtime.ACTIVE`` from code that has no handle on the scheduler (``ScheduleBatch``, the
output streamer, the radix cache).
"""

from __future__ import annotations

import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from schedkit import BatchBudget, PolicyFacade, RequestView
from schedkit.adapter import REJECTED, AdapterRuntime
from schedkit.adapter.recording import StepRecorder
from schedkit.adapter.runtime import report_of
from schedkit.facade import by_hook
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig

from schedkit_sglang.views import (
    SglangEngineView,
    SglangNodeView,
    SglangRequestView,
    unset_priority,
)

__all__ = ["ACTIVE", "REJECTED", "SglangRuntime"]

_VIEW = "_schedkit_view"  # the view rides on SGLang's Req and dies with it
_FINISHED = "_schedkit_finished"
_FINISH_REASONS = {"FINISH_LENGTH": "length", "FINISH_ABORT": "aborted"}

ACTIVE: SglangRuntime | None = None


def _ranks() -> tuple[int, int, int, int]:
    """This scheduler's (tp rank, pp rank, dp rank, dp size); zeros and 1 where SGLang
    does not say."""
    try:
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        tp, pp, dp = (int(getattr(par, f, 0) or 0) for f in ("tp_rank", "pp_rank", "dp_rank"))
        return tp, pp, dp, int(getattr(par, "dp_size", 1) or 1)
    except Exception:  # no parallel context published (a model-less driver of the class)
        return 0, 0, 0, 1


def recorder_for(scheduler: Any, path: str | None) -> StepRecorder | None:
    """The step recorder of this scheduler (``record_steps``): SGLang runs one scheduler
    per TP and PP rank, all with the same steps, so only rank 0 of each data-parallel
    replica records; replicas beyond one write ``<file>.dp<rank><suffix>``. Rows are
    flushed as written: SGLang kills its schedulers at shutdown, before ``atexit``."""
    if path is None:
        return None
    tp, pp, dp, dp_size = _ranks()
    if tp or pp:
        return None
    target = Path(path)
    if dp_size > 1:
        target = target.with_name(f"{target.stem}.dp{dp}{target.suffix}")
    args = getattr(scheduler, "server_args", None)
    device = str(getattr(args, "device", None) or "cpu")
    if device.startswith("cuda"):
        try:
            import torch

            device = torch.cuda.get_device_name(0)
        except Exception:  # pragma: no cover - no driver
            pass
    meta = {
        "engine": "sglang",
        "model": str(getattr(args, "model_path", "")),
        "gpu": device,
        "tp": int(getattr(args, "tp_size", 1) or 1),
    }
    return StepRecorder(target, meta, flush_every=1)


class SglangRuntime(AdapterRuntime):
    """What a schedkit-enabled SGLang scheduler keeps in ``scheduler.schedkit``."""

    engine: SglangEngineView

    def __init__(
        self,
        scheduler: Any,
        facade: PolicyFacade,
        trust: TrustConfig | None = None,
        record_steps: str | None = None,
    ) -> None:
        recorder = recorder_for(scheduler, record_steps)
        super().__init__(facade, SglangEngineView(scheduler), recorder)
        self.scheduler = scheduler
        self.trust = trust or DEFAULT_TRUST  # the scheduler-side bounds (schedkit.trust)
        self.seal = Seal.from_environ()  # set: only the edge's sealed metadata is trusted
        self.unset_priority = unset_priority(scheduler)
        self.observer_errors = 0  # adapter faults while observing (logged, not raised)
        self.timing = False  # mark requests so SGLang returns their time stats
        self.budget: BatchBudget | None = None  # this prefill pass's, while it differs
        self.num_batches = 0  # batches SGLang ran (run_batch): the last step's index
        self._step_started = 0.0
        self._preempted: list[RequestView] = []  # since the last batch launched
        self._batch_index: OrderedDict[int, int] = OrderedDict()  # id(key) -> index, open
        self._victims: set[int] = set()  # id() of Reqs the policy put first to retract

    def view(self, req: Any) -> SglangRequestView:
        view: SglangRequestView | None = getattr(req, _VIEW, None)
        if view is None:
            engine = self.engine
            view = SglangRequestView(
                req,
                engine.epoch,
                engine.node,
                self.unset_priority,
                engine.arrival_of(req),
                self.trust,
                self.seal,
            )
            setattr(req, _VIEW, view)
        return view

    def priority(self, req: Any) -> int:
        """``req``'s priority as policies see it (``SglangRequestView.priority``)."""
        return self.view(req).priority

    # -- waiting order and batch budget ---------------------------------------------

    def order(self, waiting: list[Any]) -> None:
        """Reorder SGLang's waiting queue in place by the policy's order."""
        if not waiting:
            return
        started = time.perf_counter()
        order = self.facade.order_waiting([self.view(r) for r in waiting], self.engine)
        self.timed("order_waiting", started, order is not None)
        if order is not None:
            waiting[:] = [cast(SglangRequestView, v).req for v in order]

    def plan(self) -> BatchBudget | None:
        """This prefill pass's budget when the policy changes SGLang's, else None."""
        scheduler = self.scheduler
        chunk = scheduler.chunked_prefill_size
        default = BatchBudget(
            token_budget=int(scheduler.max_prefill_tokens),
            max_running=int(scheduler.max_running_requests),
            prefill_chunk=int(chunk) if chunk is not None and chunk > 0 else 0,
        )
        started = time.perf_counter()
        budget = self.facade.plan_batch(self.engine, default)
        self.timed("plan_batch", started, budget != default)
        return None if budget == default else budget

    # -- preemption -----------------------------------------------------------------

    def victims(self, running: Sequence[Any], needing: Any) -> list[Any] | None:
        """The policy's preemption victims among ``running`` (SGLang Reqs), or None."""
        views = [self.view(r) for r in running]
        started = time.perf_counter()
        chosen = self.facade.select_victims(views, self.view(needing), self.engine)
        self.timed("select_victims", started, chosen is not None)
        if chosen is None:
            return None
        return [cast(SglangRequestView, v).req for v in chosen]

    def retraction_order(self, reqs: Sequence[Any], default: list[int]) -> list[int]:
        """SGLang's retraction order (kept first, retracted last) with the policy's
        victims moved to the end, first victim last. ``needing`` is the request SGLang
        would keep longest: the whole decode batch needs memory, not one request."""
        chosen = self.victims(reqs, reqs[default[0]])
        if not chosen:
            self._victims = set()
            return default
        position = {id(req): i for i, req in enumerate(reqs)}
        victims = [position[id(req)] for req in chosen]
        self._victims = {id(req) for req in chosen}
        named = set(victims)
        return [i for i in default if i not in named] + victims[::-1]

    def preempted(self, reqs: Sequence[Any], chosen: set[int] | None = None) -> None:
        """``reqs`` were retracted or preempted this step; ``chosen``: ``id()`` of those
        the policy named (default: the victims of the last ``retraction_order``)."""
        victims = self._victims if chosen is None else chosen
        self._preempted.extend(self.view(req) for req in reqs)
        placed = sum(1 for req in reqs if id(req) in victims)
        if placed:
            self.victims_placed(placed)
        self._victims = set()

    # -- eviction -------------------------------------------------------------------

    def eviction_ranks(self, leaves: Sequence[Any], num_tokens: int) -> dict[int, int] | None:
        """Position of each radix-tree leaf in the policy's eviction order (by ``id``),
        or None for SGLang's own order. ``num_tokens``: how many tokens SGLang must free."""
        views = [SglangNodeView(node) for node in leaves]
        # Leaves hold many tokens each: ask for as many as would free num_tokens, in the
        # engine's order, but at least one.
        need = 0
        freed = 0
        for view in sorted(views, key=lambda v: v.last_access):
            if freed >= num_tokens:
                break
            freed += view.num_tokens
            need += 1
        started = time.perf_counter()
        chosen = self.facade.select_evictions(views, max(1, need), self.engine)
        self.timed("select_evictions", started, chosen is not None)
        if chosen is None:
            return None
        return {id(cast(SglangNodeView, v).node): i for i, v in enumerate(chosen)}

    # -- steps ----------------------------------------------------------------------

    def step_started(self) -> None:
        """SGLang starts forming a batch (``get_next_batch_to_run``): decisions made now
        see the index the batch will have if it runs."""
        self.engine.step_index = self.num_batches + 1
        self._step_started = self.engine.clock

    def batch_launched(self, batch: Any, key: Any) -> None:
        """SGLang ran ``batch`` (``run_batch`` returned ``key``): it is step
        ``num_batches``, reported with the requests preempted while it was formed.

        ``key`` comes back with the batch (a copy of it in the overlap loop) to
        ``process_batch_result``: at once in SGLang's normal loop, one iteration later in
        its overlap loop (``event_loop_overlap``, the GPU default), which forms and
        launches step N+1 before it processes step N's results. The report is opened in
        the ledger under ``key``, so each step is reported once, with its own requests,
        tokens and index."""
        self.num_batches += 1
        self.engine.step_index = self.num_batches
        preempted, self._preempted = self._preempted, []
        if not self.tracks_steps:
            return
        reqs = list(batch.reqs)
        lens = getattr(batch, "extend_lens", None)
        if batch.forward_mode.is_extend() and lens is not None and len(lens) == len(reqs):
            counts = [int(n) for n in lens]
            prefill, decode = sum(counts), 0
        else:
            counts = [1] * len(reqs)
            prefill, decode = 0, len(reqs)
        report = report_of([self.view(r) for r in reqs], counts, prefill, decode, preempted)
        self.open_step(key, report, self._step_started)
        index = self._batch_index
        index[id(key)] = self.num_batches
        while len(index) > self.steps.limit:  # batches whose results never came
            index.popitem(last=False)

    def step_finished(self, key: Any, batch: Any = None) -> None:
        """SGLang processed the results of ``batch``, whose ``run_batch`` returned
        ``key``: report that step, with ``engine.step_index`` its own index meanwhile (in
        the overlap loop the next batch is already formed; decisions see its index) and
        ``batch``'s requests counted in ``engine.num_running`` until they finish."""
        self.sync_metrics()
        index = self._batch_index.pop(id(key), None)
        if index is None:
            return
        engine = self.engine
        current, engine.step_index = engine.step_index, index
        engine.closing = batch
        try:
            self.close_step(key)
        finally:
            engine.step_index = current
            engine.closing = None

    # -- finishing ------------------------------------------------------------------

    def finish(self, req: Any, reason: str | None = None) -> None:
        """``req`` left the scheduler: finished, aborted or rejected (once per request);
        ``reason`` None: from SGLang's finish reason."""
        if getattr(req, _FINISHED, False):
            return
        setattr(req, _FINISHED, True)
        if reason is None:
            finish = req.finished_reason
            reason = _FINISH_REASONS.get(type(finish).__name__, "stop")
        self.request_finished(self.view(req), reason)

    def internal_state(self) -> dict[str, Any]:
        """schedkit's counters in this scheduler, for SGLang's internal-state readback
        (``Engine.get_server_info()["internal_states"][i]["schedkit"]``, ``/server_info``):
        the bench reads policy errors and steps there, since policies run here and not in
        the process that launched SGLang."""
        return {
            "policy": self.facade.label,
            "policy_errors": self.policy_errors,
            "policy_errors_by_hook": by_hook(self.facade.errors),
            "slow_hook_calls": by_hook(self.facade.slow_calls),
            "steps": int(getattr(self.scheduler, "forward_ct", self.num_batches)),
            "rejections": dict(self.rejections),
            "finished": dict(self.finished),
            "victims_placed": self.num_victims_placed,
            "evicted_by_policy": self.num_evicted_by_policy,
            "observer_errors": self.observer_errors,
        }


def __getattr__(name: str) -> Any:
    """``SchedkitRuntime``, renamed ``SglangRuntime`` (issue #36): each adapter's runtime is
    named after its engine."""
    if name == "SchedkitRuntime":
        warnings.warn(
            f"{__name__}.SchedkitRuntime is now SglangRuntime; use the new name (the old one"
            " goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return SglangRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
