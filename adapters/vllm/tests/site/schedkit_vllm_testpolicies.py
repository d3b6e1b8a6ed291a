"""Policies for the vLLM adapter's server tests. vLLM runs its scheduler in the
engine-core process, so the tests select these by name through a real entry point: this
directory (with its dist-info) goes on the server's PYTHONPATH."""

from __future__ import annotations

from collections.abc import Sequence

from schedkit import Admission, Policy, PolicyOptions, ReplicaView, RequestView, hookimpl


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


class RouteByLength(Policy):
    """Routes each request to instance ``num_prompt_tokens % len(replicas)`` of a
    disaggregated pool, so a test can tell where each went. It raises (the facade then
    counts an error and the router's default decides) when the pool is not one role's,
    or when a prefill leg is not shown as one token, as vLLM's proxy protocol sends it."""

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        roles = {r.role for r in replicas}
        if roles not in ({"prefill"}, {"decode"}):
            raise ValueError(f"a pool of roles {sorted(roles)}")
        if roles == {"prefill"} and request.max_tokens != 1:
            raise ValueError(f"a prefill leg of max_tokens={request.max_tokens}")
        return request.num_prompt_tokens % len(replicas)
