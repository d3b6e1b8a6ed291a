"""``fairbatching``: batch formation fair between prefill and decode, after Lyu, Liu, Wu,
Chen, *FairBatching: Fairness-Aware Batch Formation for LLM Inference* (arXiv:2510.14392).

Stall-free batching (Sarathi, vLLM's chunked prefill) serves every decode every step and
gives prefill what is left of a fixed token budget, whatever the deadlines. FairBatching
gives every token a deadline: a request's ``j``-th output token is due at ``arrival +
TTFT target + j x TPOT target`` (its envelope), so a request served early banks slack.
Here, within what schedkit's hooks can decide (and with the decode deadlines counted
from the first token, as serving benchmarks measure TPOT: ``first token + j x TPOT
target``, so slack banked by an early first token is not spent on TPOT):

- **Order.** Waiting requests go least slack first: the first-token deadline less the
  time their remaining prefill takes (priced with the step fit when the request joins
  the queue); a preempted request resuming with output first.
- **Step size.** While the most urgent request waiting for its first token can still
  start after the tightest decode deadline, the step's token budget is what the
  step-time model says fits before that deadline (at least one token per running
  request): decodes keep their TPOT and prefill gets the rest. Once a first-token
  deadline is the tighter, the cap lifts and the step takes the engine's whole budget:
  prefill is never starved for decodes with time to spare, nor decodes for prefill.
  A decode already behind is due one TPOT after its last token.
- **Step-time model.** ``step_s = a + b x tokens``, fitted by least squares on the steps
  the engine reports, older steps weighing less (``forget``).

What the hooks cannot express: FairBatching also lets a step skip a decode that has
slack, and raises the step above the engine's budget; a policy can only lower the
budget. The load estimator FairBatching offers a cluster router is not included.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from pydantic import Field
from schedkit import (
    BatchBudget,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)

__all__ = ["FairBatching", "StepFit"]


class StepFit:
    """``step_s = a + b x tokens`` by exponentially weighted least squares."""

    def __init__(self, forget: float, a: float, b: float) -> None:
        self.keep = 1.0 - forget
        self.sums = [0.0] * 5  # weight, x, y, xx, xy
        self.prior = (a, b)

    def add(self, tokens: float, seconds: float) -> None:
        s, k = self.sums, self.keep
        for i, v in enumerate((1.0, tokens, seconds, tokens * tokens, tokens * seconds)):
            s[i] = s[i] * k + v

    def coefficients(self) -> tuple[float, float]:
        """``(a, b)``; the prior until the steps seen vary in size."""
        w, x, y, xx, xy = self.sums
        spread = w * xx - x * x
        if w < 2.0 or spread <= 1e-9 * max(1.0, w * xx):
            return self.prior
        b = (w * xy - x * y) / spread
        if b <= 1e-12:  # flat or falling: rounding noise, not a cost per token
            return self.prior
        return max(0.0, (y - b * x) / w), b


class FairBatching(Policy):
    """Least-slack order and a step budget sized to the tightest deadline, decode or
    first token (see the module's docstring)."""

    class Options(PolicyOptions):
        ttft_ms: float = Field(
            default=1000.0, gt=0, le=1e7, description="TTFT target of requests without one, ms."
        )
        tpot_ms: float = Field(
            default=50.0, gt=0, le=1e7, description="TPOT target of requests without one, ms."
        )
        forget: float = Field(
            default=0.01,
            gt=0.0,
            lt=1.0,
            description="How fast the step-time fit forgets: each step's weight decays by this.",
        )
        prior_step_s: float = Field(
            default=0.01, ge=0.0, le=10.0, description="Step time at zero tokens until fitted."
        )
        prior_tokens_per_s: float = Field(
            default=20_000.0, gt=0.0, le=1e9, description="Tokens per second until fitted."
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        opts = self.options
        self.fit = StepFit(opts.forget, opts.prior_step_s, 1.0 / opts.prior_tokens_per_s)
        self.decoding: dict[str, RequestView] = {}  # running, past their first token
        self.first_token: dict[str, float] = {}  # request id -> clock at its first token
        self.last_token: dict[str, float] = {}  # request id -> clock at its last token
        self.pending: dict[str, RequestView] = {}  # arrived, no first token yet
        self._due_heap: list[tuple[float, str]] = []  # (first-token deadline, id), lazily
        self._gone: set[str] = set()  # finished since the last step report

    def due(self, request: RequestView, token: int) -> float:
        """When output token ``token`` (0: the first) of ``request`` is due (its envelope)."""
        ttft = request.slo_ttft_ms if request.slo_ttft_ms is not None else self.options.ttft_ms
        tpot = request.slo_tpot_ms if request.slo_tpot_ms is not None else self.options.tpot_ms
        return request.arrival_time + (ttft + tpot * token) / 1000.0

    def next_due(self, request: RequestView) -> float:
        """When ``request``'s next token is due: ``j`` TPOT targets after its first token
        for its ``j``-th (so that meeting every deadline is meeting the TPOT target as
        serving benchmarks measure it, from the first token), or one TPOT after its last
        token when it is already behind."""
        rid = request.request_id
        first = self.first_token.get(rid)
        if first is None:
            return self.due(request, request.num_output_tokens)
        tpot = request.slo_tpot_ms if request.slo_tpot_ms is not None else self.options.tpot_ms
        tpot_s = tpot / 1000.0
        return max(first + tpot_s * request.num_output_tokens, self.last_token[rid] + tpot_s)

    def slack_key(self, request: RequestView) -> tuple[int, float, float]:
        """Resuming requests first, then least slack, then arrival."""
        left = max(0, request.num_prompt_tokens - request.num_computed_tokens)
        start_by = self.due(request, 0) - self.fit.coefficients()[1] * left
        return (0 if request.num_output_tokens else 1, start_by, request.arrival_time)

    @hookimpl
    def on_request_arrived(self, request: RequestView) -> None:
        self.pending[request.request_id] = request
        heapq.heappush(self._due_heap, (self.due(request, 0), request.request_id))

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        if report.num_steps > 0:
            tokens = (report.num_prefill_tokens + report.num_decode_tokens) / report.num_steps
            self.fit.add(tokens, report.duration_s / report.num_steps)
        gone, self._gone = self._gone, set()
        for request in report.scheduled:
            if request.num_output_tokens > 0 and request.request_id not in gone:
                rid = request.request_id
                self.decoding[rid] = request
                self.first_token.setdefault(rid, engine.clock)
                self.last_token[rid] = engine.clock
                self.pending.pop(rid, None)
        for request in report.preempted:
            self.decoding.pop(request.request_id, None)

    @hookimpl
    def on_request_finished(self, request: RequestView) -> None:
        rid = request.request_id
        # An engine may tell of the finish before the report of the step that ended it
        # (the simulator, for a run of decode steps): that report must not bring it back.
        self._gone.add(rid)
        self.decoding.pop(rid, None)
        self.first_token.pop(rid, None)
        self.last_token.pop(rid, None)
        self.pending.pop(rid, None)

    @hookimpl
    def waiting_key(self, request: RequestView) -> tuple[int, float, float]:
        # Keyed when the request joins the queue, with the step fit of that moment: the
        # engine keeps the queue in key order (no sort of the whole queue per step).
        return self.slack_key(request)

    def first_token_due(self) -> float:
        """The earliest first-token deadline among requests without one (inf: none)."""
        heap = self._due_heap
        while heap and heap[0][1] not in self.pending:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget | None:
        if not self.decoding:
            return None
        a, b = self.fit.coefficients()
        decode_due = min(self.next_due(r) for r in self.decoding.values())
        if self.first_token_due() <= decode_due:
            return None  # a first token is the more urgent: the whole budget
        room = (decode_due - engine.clock - a) / b
        floor = engine.num_running + 1
        budget = max(floor, int(room)) if math.isfinite(room) else floor
        if budget >= default.token_budget:
            return None
        return dataclasses.replace(default, token_budget=budget)
