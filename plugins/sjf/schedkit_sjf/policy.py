"""``sjf``: shortest predicted job first, with an aging credit so long jobs never starve."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field
from schedkit import EngineView, Policy, PolicyOptions, RequestView, hookimpl

from schedkit_sjf.predictors import LearnedPredictor, OraclePredictor, OutputPredictor

__all__ = ["ShortestPredictedJobFirst", "remaining_prefill"]


def remaining_prefill(request: RequestView) -> int:
    """Tokens the request must compute before its next token: its prompt plus, after a
    preemption (recompute), the output so far, less what is already computed."""
    return max(
        0, request.num_prompt_tokens + request.num_output_tokens - request.num_computed_tokens
    )


class ShortestPredictedJobFirst(Policy):
    """Order the waiting queue by predicted remaining work minus an aging credit.

    score = remaining prefill tokens
            + ``output_weight`` x (predicted output tokens - output so far)
            - ``aging_rate`` x seconds waited

    lowest score first, earlier arrival breaking ties. Ranking short jobs first cuts the
    head-of-line blocking that long jobs cause under FCFS (Fu et al., "Efficient LLM
    Scheduling by Learning to Rank", NeurIPS 2024). The aging credit grows without bound,
    so every waiting request eventually ranks first: nothing starves.
    """

    class Options(PolicyOptions):
        predictor: Literal["oracle", "learned"] = Field(
            default="learned",
            description=(
                "Output-length predictor: 'oracle' uses max_tokens (exact in trace replay, an"
                " upper bound in serving); 'learned' fits running means from finished requests."
            ),
        )
        output_weight: float = Field(
            default=1.0,
            ge=0.0,
            le=1000.0,
            description="Weight of one predicted output token against one prompt token.",
        )
        aging_rate: float = Field(
            default=100.0,
            ge=0.0,
            le=1e7,
            description="Work tokens credited per second a request has waited; 0: no aging.",
        )
        prior_output_tokens: float = Field(
            default=256.0,
            ge=1.0,
            le=1e6,
            description="Learned predictor: the prediction before enough requests finished.",
        )
        min_samples: int = Field(
            default=16,
            ge=1,
            le=1_000_000,
            description="Learned predictor: finished requests a mean needs before it is used.",
        )
        max_tenants: int = Field(
            default=10_000,
            ge=1,
            le=10_000_000,
            description=(
                "Learned predictor: most tenants whose means are kept; a new one evicts the"
                " least recently seen tenant still learning, else the least recently seen."
            ),
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        opts = self.options
        self.predictor: OutputPredictor = (
            OraclePredictor()
            if opts.predictor == "oracle"
            else LearnedPredictor(opts.prior_output_tokens, opts.min_samples, opts.max_tenants)
        )

    def score(self, request: RequestView, clock: float) -> float:
        """Predicted remaining work minus the aging credit; lower is served first."""
        opts = self.options
        output_left = max(0.0, self.predictor.predict(request) - request.num_output_tokens)
        waited = max(0.0, clock - request.arrival_time)
        return (
            remaining_prefill(request) + opts.output_weight * output_left - opts.aging_rate * waited
        )

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        clock = engine.clock
        keyed = [(self.score(r, clock), r.arrival_time, i, r) for i, r in enumerate(waiting)]
        keyed.sort(key=lambda k: k[:3])
        return [k[3] for k in keyed]

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        self.predictor.observe(request, reason)
