"""Output-length predictors: how many tokens a request will still generate.

``OraclePredictor`` reads ``max_tokens``: in trace replay that is the trace's output length,
so it is exact there and an upper bound elsewhere (clients set ``max_tokens`` generously).
``LearnedPredictor`` fits running means from requests that finished normally, keyed by
tenant and prompt-length bucket, and falls back to coarser keys, then to a prior.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Protocol

from schedkit import RequestView

__all__ = [
    "TENANT_KEY_CHARS",
    "LearnedPredictor",
    "OraclePredictor",
    "OutputPredictor",
    "prompt_bucket",
    "tenant_key",
]

# Outputs that tell the model something: "rejected" and "aborted" requests ended early.
_LEARN_FROM = frozenset({"stop", "length"})

TENANT_KEY_CHARS = 128
"""Longest tenant key stored; longer ids are stored as a prefix and their SHA-256."""


def tenant_key(tenant: str) -> str:
    """``tenant`` itself when shorter than ``TENANT_KEY_CHARS``, else its first characters,
    ``#`` and its SHA-256 (exactly ``TENANT_KEY_CHARS`` long, so distinct ids keep
    distinct keys, and a key never keeps a long id alive)."""
    if len(tenant) < TENANT_KEY_CHARS:
        return tenant
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{tenant[: TENANT_KEY_CHARS - 65]}#{digest}"


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

    Bounded: statistics for at most ``max_tenants`` tenants, keyed by ``tenant_key``, each
    with at most one entry per prompt bucket (a bucket per power of two: ~20 for any real
    context length). A new tenant makes room by evicting the least recently observed
    tenant that is still *learning* (fewer than ``min_samples`` requests, so none of its
    means is used yet); only when every tenant is trained, the least recently observed
    one. A flood of one-off tenant ids therefore evicts its own ids, not the tenants whose
    means are in use. An evicted tenant's requests fall back to the global mean.
    """

    def __init__(self, prior: float, min_samples: int, max_tenants: int = 10_000) -> None:
        self.prior = prior
        self.min_samples = min_samples
        self.max_tenants = max_tenants
        self._all = [0, 0]  # finished requests learned from, their output tokens
        # tenant key -> {bucket or None (the tenant): [requests, output tokens]}, least
        # recently observed first; trained: at least min_samples requests
        self._learning: OrderedDict[str, dict[int | None, list[int]]] = OrderedDict()
        self._trained: OrderedDict[str, dict[int | None, list[int]]] = OrderedDict()
        # request id -> key of a long tenant id, for requests not finished yet: hashed
        # once per request, not once per step (freed in observe, called for every finish)
        self._long_keys: dict[str, str] = {}

    def _key(self, request: RequestView) -> str:
        tenant = request.tenant
        if len(tenant) < TENANT_KEY_CHARS:
            return tenant
        key = self._long_keys.get(request.request_id)
        if key is None:
            key = self._long_keys[request.request_id] = tenant_key(tenant)
        return key

    def predict(self, request: RequestView) -> float:
        key = self._key(request)
        stats = self._trained.get(key)
        if stats is not None:  # a learning tenant has no mean in use yet
            for bucket in (prompt_bucket(request.num_prompt_tokens), None):
                entry = stats.get(bucket)
                if entry is not None and entry[0] >= self.min_samples:
                    return min(entry[1] / entry[0], float(request.max_tokens))
        if self._all[0] >= self.min_samples:
            return min(self._all[1] / self._all[0], float(request.max_tokens))
        return min(self.prior, float(request.max_tokens))

    def observe(self, request: RequestView, reason: str) -> None:
        key = self._key(request)
        self._long_keys.pop(request.request_id, None)
        if reason not in _LEARN_FROM:
            return
        output = request.num_output_tokens
        self._all[0] += 1
        self._all[1] += output
        learning, trained = self._learning, self._trained
        stats = trained.get(key)
        if stats is not None:
            trained.move_to_end(key)
        else:
            stats = learning.get(key)
            if stats is not None:
                learning.move_to_end(key)
            else:
                if len(learning) + len(trained) >= self.max_tenants:
                    (learning if learning else trained).popitem(last=False)
                stats = learning[key] = {}
        for bucket in (prompt_bucket(request.num_prompt_tokens), None):
            entry = stats.setdefault(bucket, [0, 0])
            entry[0] += 1
            entry[1] += output
        if stats[None][0] >= self.min_samples and key in learning:
            del learning[key]
            trained[key] = stats

    def tenants(self) -> int:
        """Tenants with statistics kept."""
        return len(self._learning) + len(self._trained)

    def samples(self) -> int:
        """Finished requests learned from so far."""
        return self._all[0]
