"""``cache-aware``: admit the waiting requests whose prompts are already cached first.

vLLM 0.34's ``--cache-aware-admission-window N`` (PR #54625,
``Scheduler._reorder_waiting_by_cached_prefix``), as a policy on every engine: once the
KV cache is at least ``threshold`` used, the first ``window`` waiting requests are
reordered by how many of their tokens the prefix cache holds now, deepest hit first,
arrival (the engine's order) between equals. Only requests that never started move: one
that was preempted or has tokens computed keeps its place, and nothing moves past it
(vLLM's rule). Admitting a cached request first reuses its blocks before eviction takes
them and frees the step's budget for others.

The hit is the engine's own lookup, ``EngineView.cached_tokens`` (the capability matrix
says how each engine looks up).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field
from schedkit import EngineView, Policy, PolicyOptions, RequestView, hookimpl

__all__ = ["CacheAwareAdmission"]


class CacheAwareAdmission(Policy):
    """Reorder the head of the waiting queue by prefix-cache hit, deepest first."""

    fields = ("EngineView.cached_tokens",)

    class Options(PolicyOptions):
        window: int = Field(
            default=64,
            ge=2,
            le=1 << 16,
            description="How many requests at the head of the waiting queue may be"
            " reordered (vLLM's --cache-aware-admission-window; the PR's best run used 64).",
        )
        threshold: float = Field(
            default=0.5,
            ge=0.0,
            le=1.0,
            description="KV cache usage (1 - free/total) below which the order is left"
            " alone (vLLM's --cache-aware-admission-threshold, 0.5 in 0.34).",
        )

    options: Options

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView] | None:
        if len(waiting) < 2 or engine.kv_blocks_total <= 0:
            return None
        usage = 1.0 - engine.kv_blocks_free / engine.kv_blocks_total
        if usage < self.options.threshold:
            return None
        head = waiting[: self.options.window]
        slots = [
            i for i, r in enumerate(head) if not r.num_preemptions and not r.num_computed_tokens
        ]
        if len(slots) < 2:
            return None
        cached = {i: engine.cached_tokens(head[i]) for i in slots}
        order = sorted(slots, key=lambda i: (-cached[i], i))
        if order == slots:
            return None
        reordered = list(waiting)
        for slot, source in zip(slots, order, strict=True):
            reordered[slot] = head[source]
        return reordered
