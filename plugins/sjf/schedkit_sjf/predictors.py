"""Output-length predictors: how many tokens a request will still generate.

``OraclePredictor`` reads ``max_tokens``: in trace replay that is the trace's output length,
so it is exact there and an upper bound elsewhere (clients set ``max_tokens`` generously).
``LearnedPredictor`` fits running means from requests that finished normally, keyed by
tenant and prompt-length bucket, and falls back to coarser keys, then to a prior.
"""

from __future__ import annotations

from typing import Protocol

from schedkit import RequestView

__all__ = ["LearnedPredictor", "OraclePredictor", "OutputPredictor", "prompt_bucket"]

# Outputs that tell the model something: "rejected" and "aborted" requests ended early.
_LEARN_FROM = frozenset({"stop", "length"})


class OutputPredictor(Protocol):
    """Predicts a request's total output tokens; may learn from finished requests."""

    def predict(self, request: RequestView) -> float:
        """Expected total output tokens of ``request`` (generated so far included)."""
        ...

    def observe(self, request: RequestView, reason: str) -> None:
        """Learn from a request that left the engine for ``reason``."""
        ...


class OraclePredictor:
    """The request's ``max_tokens``: exact in trace replay, an upper bound in serving."""

    def predict(self, request: RequestView) -> float:
        return float(request.max_tokens)

    def observe(self, request: RequestView, reason: str) -> None:
        return None


def prompt_bucket(num_prompt_tokens: int) -> int:
    """Prompt-length bucket: 0 for 0-1 tokens, then one bucket per power of two."""
    return max(num_prompt_tokens, 1).bit_length() - 1


class LearnedPredictor:
    """Running mean of output tokens per (tenant, prompt bucket), backing off when sparse.

    A prediction uses the first of these with at least ``min_samples`` finished requests:
    the tenant's requests with a prompt in the same power-of-two bucket, the tenant's
    requests, all requests; else ``prior``. It never exceeds the request's ``max_tokens``.
    Only requests that finished normally (``stop`` or ``length``) are learned from.
    """

    def __init__(self, prior: float, min_samples: int) -> None:
        self.prior = prior
        self.min_samples = min_samples
        # key -> [finished requests, their output tokens]; key (tenant, bucket),
        # (tenant, None) or (None, None).
        self._stats: dict[tuple[str | None, int | None], list[int]] = {}

    def _keys(self, request: RequestView) -> tuple[tuple[str | None, int | None], ...]:
        tenant = request.tenant
        return ((tenant, prompt_bucket(request.num_prompt_tokens)), (tenant, None), (None, None))

    def predict(self, request: RequestView) -> float:
        stats = self._stats
        for key in self._keys(request):
            entry = stats.get(key)
            if entry is not None and entry[0] >= self.min_samples:
                return min(entry[1] / entry[0], float(request.max_tokens))
        return min(self.prior, float(request.max_tokens))

    def observe(self, request: RequestView, reason: str) -> None:
        if reason not in _LEARN_FROM:
            return
        output = request.num_output_tokens
        for key in self._keys(request):
            entry = self._stats.setdefault(key, [0, 0])
            entry[0] += 1
            entry[1] += output

    def samples(self) -> int:
        """Finished requests learned from so far."""
        entry = self._stats.get((None, None))
        return entry[0] if entry else 0
