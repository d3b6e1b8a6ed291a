"""Policies for the vLLM adapter's server tests. vLLM runs its scheduler in the
engine-core process, so the tests select these by name through a real entry point: this
directory (with its dist-info) goes on the server's PYTHONPATH."""

from __future__ import annotations

from schedkit import Admission, Policy, PolicyOptions, RequestView, hookimpl


class EchoMetadata(Policy):
    """Rejects requests of exactly ``prompt_tokens`` prompt tokens, with their metadata
    as the scheduler sees it as the reason: the client reads it in ``stop_reason``."""

    class Options(PolicyOptions):
        prompt_tokens: int = 17

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if request.num_prompt_tokens != self.options.prompt_tokens:  # type: ignore[attr-defined]
            return None
        return Admission.reject(
            f"tenant={request.tenant} priority={request.priority}"
            f" slo_ttft_ms={request.slo_ttft_ms} slo_tpot_ms={request.slo_tpot_ms}"
        )
