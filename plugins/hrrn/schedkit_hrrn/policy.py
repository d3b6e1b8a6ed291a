"""``hrrn``: highest response ratio next, with SGLang's token-based aging.

A waiting request's response ratio is ``1 + waited / service``: its service is the
prefill it still needs (uncached prompt tokens), and what it has waited is counted, as
SGLang's ``hrrn`` counts it (PR #32911, ``SchedulePolicy._sort_by_hrrn``), in prefill
tokens the engine has processed since it arrived; equal to classic HRRN's seconds when
prefill throughput is constant, and independent of how fast the GPU is. Highest ratio
first: short prefills go first, and a long one rises as work passes it by, so it does not
starve. With ``aging = "seconds"`` the wait is the engine clock's, over the prefill time
``service / prefill_tokens_per_s``: classic HRRN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field
from schedkit import EngineView, Policy, PolicyOptions, RequestView, StepReport, hookimpl

__all__ = ["HighestResponseRatioNext", "uncached_tokens"]


def uncached_tokens(request: RequestView) -> int:
    """The prefill ``request`` still needs: its prompt (and after a preemption, its output
    so far) less what is computed or was served from the prefix cache."""
    done = max(request.num_computed_tokens, request.num_cached_tokens)
    return max(0, request.num_prompt_tokens + request.num_output_tokens - done)


class HighestResponseRatioNext(Policy):
    """Order the waiting queue by response ratio, highest first (see the module's
    docstring); a request with nothing to prefill goes first, earlier arrival breaks ties."""

    class Options(PolicyOptions):
        aging: Literal["tokens", "seconds"] = Field(
            default="tokens",
            description="How waiting is counted: 'tokens' (SGLang's: prefill tokens the engine"
            " processed since the request arrived) or 'seconds' (the engine clock).",
        )
        prefill_tokens_per_s: float = Field(
            default=10_000.0,
            gt=0.0,
            le=1e9,
            description="aging='seconds': the prefill rate that turns service tokens into time.",
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self.processed = 0  # prefill tokens the engine has computed so far
        self.arrived_at: dict[str, int] = {}  # request id -> ``processed`` when it arrived

    def ratio(self, request: RequestView, clock: float) -> float:
        """``waited / service`` (the ratio less 1); infinite with nothing to prefill."""
        service = uncached_tokens(request)
        if service <= 0:
            return float("inf")
        if self.options.aging == "seconds":
            waited = max(0.0, clock - request.arrival_time) * self.options.prefill_tokens_per_s
        else:
            waited = self.processed - self.arrived_at.get(request.request_id, self.processed)
        return max(0.0, waited) / service

    @hookimpl
    def on_request_arrived(self, request: RequestView) -> None:
        self.arrived_at[request.request_id] = self.processed

    @hookimpl
    def on_step_finished(self, report: StepReport) -> None:
        self.processed += report.num_prefill_tokens

    @hookimpl
    def on_request_finished(self, request: RequestView) -> None:
        self.arrived_at.pop(request.request_id, None)

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        clock = engine.clock
        keyed = [(-self.ratio(r, clock), r.arrival_time, i, r) for i, r in enumerate(waiting)]
        keyed.sort(key=lambda k: k[:3])
        return [k[3] for k in keyed]
