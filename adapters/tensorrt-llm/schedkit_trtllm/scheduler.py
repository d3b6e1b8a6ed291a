"""``SchedkitRequestScheduler``: schedkit's decisions around TensorRT-LLM's
``RequestScheduler`` (the PyTorch executor's ``SimpleScheduler``: a capacity scheduler,
then a micro-batch scheduler).

``PyExecutor._schedule`` calls ``scheduler.schedule_request(active_requests,
inflight_request_ids)`` once per step with every active request, in the order both
inner schedulers walk. This wrapper decides, before calling the inner scheduler:

- admission: each request seen for the first time goes through ``PolicyFacade.admit``;
  a rejected one is left out of every schedule and queued for the executor to cancel
  (``take_rejected``);
- waiting order: the requests that have not started (``CONTEXT_INIT``, no computed
  tokens) are reordered by ``order_waiting``/``waiting_key`` among themselves, after the
  requests already running, which keep TensorRT-LLM's order;
- batch budget: ``plan_batch``'s token budget and running cap are set on the inner
  micro-batch scheduler (``max_num_tokens``, ``max_batch_size``) for this call only.

Preemption victims and KV eviction are not decided here (the design doc says what
TensorRT-LLM lets Python do about them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schedkit import BatchBudget, EngineState, PolicyFacade, RequestState, RequestView

__all__ = ["CONTEXT_INIT", "GENERATION_IN_PROGRESS", "SchedkitRequestScheduler", "install"]

# LlmRequestState names (tensorrt_llm.bindings.LlmRequestState), compared by name so that
# this module needs no tensorrt_llm
CONTEXT_INIT = "CONTEXT_INIT"
GENERATION_IN_PROGRESS = "GENERATION_IN_PROGRESS"


def _state(req: Any) -> str:
    state = getattr(req, "state", None)
    return str(getattr(state, "name", state))


def _view(req: Any, arrival: float) -> RequestState:
    """A snapshot of ``req`` as a policy sees it (a copy: writing to it changes nothing)."""
    prompt = int(getattr(req, "orig_prompt_len", 0) or getattr(req, "prompt_len", 0) or 0)
    view = RequestState(
        str(req.request_id),
        prompt,
        int(getattr(req, "max_new_tokens", 0) or 0),
        arrival_time=arrival,
        priority=int(getattr(req, "py_schedkit_priority", 0) or 0),
        tenant=str(getattr(req, "py_schedkit_tenant", "") or "default"),
    )
    view.num_computed_tokens = int(getattr(req, "context_current_position", 0) or 0)
    return view


class SchedkitRequestScheduler:
    """Wraps the executor's ``RequestScheduler`` (``inner``) with ``facade``'s decisions."""

    def __init__(self, inner: Any, facade: PolicyFacade, engine: EngineState | None = None):
        self.inner = inner
        self.facade = facade
        self.engine = engine or EngineState(kv_blocks_total=0, block_size=0)
        self._arrivals: dict[Any, float] = {}  # request id -> the step it was first seen
        self._rejected: dict[Any, str] = {}  # request id -> reason, until taken
        self._step = 0

    # -- what PyExecutor calls -------------------------------------------------------

    def schedule_request(self, active_requests: Sequence[Any], inflight_request_ids: Any) -> Any:
        self._step += 1
        self.engine.step_index = self._step
        admitted = [r for r in active_requests if self._admitted(r)]
        running = [r for r in admitted if not self._waiting(r)]
        waiting = [r for r in admitted if self._waiting(r)]
        self.engine.num_running, self.engine.num_waiting = len(running), len(waiting)
        ordered = running + self._order(waiting)
        with _budget(self.inner, self.facade, self.engine):
            return self.inner.schedule_request(ordered, inflight_request_ids)

    def can_schedule(self, requests: Sequence[Any]) -> bool:
        return bool(self.inner.can_schedule(requests))

    def take_rejected(self) -> dict[Any, str]:
        """The requests the policies rejected since the last call, for the executor to
        cancel (``PyExecutor`` answers them with an error naming the reason)."""
        rejected, self._rejected = self._rejected, {}
        return rejected

    # -- decisions ---------------------------------------------------------------------

    @staticmethod
    def _waiting(req: Any) -> bool:
        return _state(req) == CONTEXT_INIT and not getattr(req, "context_current_position", 0)

    def _admitted(self, req: Any) -> bool:
        rid = req.request_id
        if rid in self._arrivals:
            return rid not in self._rejected
        self._arrivals[rid] = float(self._step)
        decision = self.facade.admit(_view(req, float(self._step)), self.engine)
        if decision.admitted:
            return True
        self._rejected[rid] = str(decision.reason)
        return False

    def _order(self, waiting: list[Any]) -> list[Any]:
        if len(waiting) < 2 or not self.facade.has_order:
            return waiting
        views = [_view(r, self._arrivals[r.request_id]) for r in waiting]
        by_id = {v.request_id: r for v, r in zip(views, waiting, strict=True)}
        order: Sequence[RequestView] | None = self.facade.order_waiting(views, self.engine)
        return waiting if order is None else [by_id[v.request_id] for v in order]


class _budget:
    """``plan_batch``'s token budget and running cap set on the inner micro-batch
    scheduler (``max_num_tokens``, ``max_batch_size``) for one call, restored after."""

    def __init__(self, inner: Any, facade: PolicyFacade, engine: EngineState) -> None:
        self.target = getattr(inner, "micro_batch_scheduler", None)
        self.facade, self.engine = facade, engine
        self.saved: tuple[Any, Any] | None = None

    def __enter__(self) -> None:
        target = self.target
        if not self.facade.has_plan or target is None:
            return
        default = BatchBudget(int(target.max_num_tokens or 0), int(target.max_batch_size))
        budget = self.facade.plan_batch(self.engine, default)
        if budget != default:
            self.saved = (target.max_num_tokens, target.max_batch_size)
            target.max_num_tokens, target.max_batch_size = budget.token_budget, budget.max_running

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None and self.target is not None:
            self.target.max_num_tokens, self.target.max_batch_size = self.saved


def install(executor: Any, facade: PolicyFacade) -> SchedkitRequestScheduler:
    """Wrap ``executor.scheduler`` (a ``PyExecutor``'s) with ``facade``. Imports
    ``tensorrt_llm`` to check it is there: the design's activation (a hook on
    ``create_py_executor_instance``, selected by ``SCHEDKIT_POLICY``) is not written."""
    try:
        import tensorrt_llm  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "schedkit-trtllm wraps TensorRT-LLM's PyTorch executor; install tensorrt_llm"
            " (a GPU build) first"
        ) from exc
    wrapped = SchedkitRequestScheduler(executor.scheduler, facade)
    executor.scheduler = wrapped
    return wrapped
