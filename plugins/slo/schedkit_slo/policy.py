"""``slo``: earliest TTFT deadline first, and early rejection of requests that would miss it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field
from schedkit import (
    Admission,
    BatchBudget,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)

from schedkit_slo.backlog import Backlog, prefill_left

__all__ = ["DeadlineAware", "Targets"]

_MS_MAX = 3_600_000.0  # an hour: any larger target is a unit mistake


class Targets(BaseModel):
    """Latency targets of one tenant; ``None`` falls back to the policy-wide default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(default=None, gt=0, le=_MS_MAX)
    tpot_ms: float | None = Field(default=None, gt=0, le=_MS_MAX)


class DeadlineAware(Policy):
    """EDF on TTFT deadlines, prediction-based early rejection, TPOT-bounded steps.

    A request's deadline is its arrival plus its TTFT target: its own ``slo_ttft_ms``,
    else its tenant's (``tenants``), else ``ttft_ms``. The waiting queue is served earliest
    deadline first; requests that already produced a token (resuming after a preemption)
    go first, and with ``late_last`` requests whose deadline has passed go last.

    On arrival it predicts the request's TTFT as the time already waited plus
    ``slack`` x (prefill tokens queued ahead of it under EDF + its own prompt) /
    ``prefill_tokens_per_s``, and rejects it with the reason
    ``"predicted TTFT X ms exceeds SLO Y ms"`` when that exceeds its target: the client
    learns at once (HTTP 429) instead of timing out, and the engine spends no work on a
    request that would miss anyway (Qin et al., Mooncake, FAST 2025: prediction-based
    early rejection).

    With a TPOT target configured (``tpot_ms`` or a tenant's), each step's token budget
    is capped at the tokens ``prefill_tokens_per_s`` computes within the tightest one,
    and never below one token per running request, so that a prefill-heavy step cannot
    stall the decoding requests past their TPOT (the token budget of Sarathi-Serve,
    Agrawal et al., OSDI 2024). Per-request ``slo_tpot_ms`` values do not change the cap.
    """

    class Options(PolicyOptions):
        ttft_ms: float = Field(
            default=1000.0, gt=0, le=_MS_MAX, description="Default TTFT target, ms."
        )
        tpot_ms: float | None = Field(
            default=None,
            gt=0,
            le=_MS_MAX,
            description="Default TPOT target, ms; with tpot_budget, caps each step's tokens.",
        )
        tenants: dict[str, Targets] = Field(
            default_factory=dict, description="Targets per tenant, over the defaults."
        )
        slack: float = Field(
            default=1.0,
            ge=0.1,
            le=10.0,
            description="Multiplies the predicted queueing: > 1 rejects sooner, < 1 later.",
        )
        prefill_tokens_per_s: float = Field(
            default=20_000.0,
            ge=1.0,
            le=1e9,
            description="Prefill throughput the prediction assumes (Llama-3-8B/H100: ~20000).",
        )
        reject: bool = Field(
            default=True, description="Reject requests predicted to miss; False: EDF only."
        )
        late_last: bool = Field(
            default=True,
            description="Serve requests whose TTFT deadline has passed after the others.",
        )
        tpot_budget: bool = Field(
            default=True,
            description=(
                "When a TPOT target is configured (tpot_ms or a tenant's), cap each step at"
                " the tokens prefill_tokens_per_s computes within the tightest one."
            ),
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self.backlog = Backlog()
        opts = self.options
        tpots = [t.tpot_ms for t in opts.tenants.values() if t.tpot_ms is not None]
        if opts.tpot_ms is not None:
            tpots.append(opts.tpot_ms)
        # Tokens per step that keep a step within the tightest configured TPOT target.
        self.step_tokens: int | None = (
            max(1, int(min(tpots) / 1000.0 * opts.prefill_tokens_per_s))
            if tpots and opts.tpot_budget
            else None
        )

    # -- targets ----------------------------------------------------------------------

    def targets(self, request: RequestView) -> tuple[float, float | None]:
        """(TTFT, TPOT) targets in ms: the request's own, its tenant's, or the defaults."""
        opts = self.options
        tenant = opts.tenants.get(request.tenant)
        ttft = request.slo_ttft_ms
        if ttft is None:
            ttft = tenant.ttft_ms if tenant and tenant.ttft_ms is not None else opts.ttft_ms
        tpot = request.slo_tpot_ms
        if tpot is None:
            tpot = tenant.tpot_ms if tenant and tenant.tpot_ms is not None else opts.tpot_ms
        return ttft, tpot

    def deadline(self, request: RequestView) -> float:
        """Engine time by which its first token is due; -inf once it produced one."""
        if request.num_output_tokens > 0:
            return -math.inf  # resuming after a preemption: TTFT is behind it
        return request.arrival_time + self.targets(request)[0] / 1000.0

    def predicted_ttft_ms(self, request: RequestView, engine: EngineView) -> float:
        """Time waited plus slack x (queued prefill ahead under EDF + own) / throughput."""
        opts = self.options
        work = self.backlog.ahead(self.deadline(request)) + prefill_left(request)
        waited = max(0.0, engine.clock - request.arrival_time)
        return 1000.0 * (waited + opts.slack * work / opts.prefill_tokens_per_s)

    # -- hooks ------------------------------------------------------------------------

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if engine.num_waiting == 0 and engine.num_running == 0:
            self.backlog.clear()  # an idle engine has nothing queued, whatever we missed
        if self.options.reject:
            predicted = self.predicted_ttft_ms(request, engine)
            target = self.targets(request)[0]
            if predicted > target:
                return Admission.reject(
                    f"predicted TTFT {predicted:.0f} ms exceeds SLO {target:.0f} ms",
                    code="slo_ttft_unreachable",
                )
        self.backlog.set(request.request_id, self.deadline(request), prefill_left(request))
        return None  # no objection: a later policy may still decide

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        clock, late_last, backlog = engine.clock, self.options.late_last, self.backlog
        keyed = []
        for i, request in enumerate(waiting):
            deadline = self.deadline(request)
            backlog.set(request.request_id, deadline, prefill_left(request))  # resync
            late = late_last and clock > deadline > -math.inf  # resumed ones are never late
            keyed.append((late, deadline, request.arrival_time, i, request))
        keyed.sort(key=lambda k: k[:4])
        return [k[4] for k in keyed]

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget | None:
        if self.step_tokens is None:
            return None
        # Never below one token per running request, so every decode still gets its step.
        budget = min(default.token_budget, max(self.step_tokens, engine.num_running + 1))
        if budget >= default.token_budget:
            return None
        return dataclasses.replace(default, token_budget=budget)

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        backlog = self.backlog
        for request in report.scheduled:
            left = prefill_left(request)
            if left:
                backlog.set(request.request_id, self.deadline(request), left)
            else:
                backlog.remove(request.request_id)
        for request in report.preempted:  # recompute: its prefill starts over
            backlog.set(request.request_id, self.deadline(request), prefill_left(request))
        if engine.num_waiting == 0 and engine.num_running == 0:
            backlog.clear()

    @hookimpl
    def on_request_finished(self, request: RequestView) -> None:
        self.backlog.remove(request.request_id)
