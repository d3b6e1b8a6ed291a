"""``prefix-aware``: keep the blocks that queued requests will reuse, then the heads of
prefixes; evict never-reused tails first."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from schedkit import BlockView, EngineView, Policy, PolicyOptions, RequestView, hookimpl

__all__ = ["PrefixAware", "prefix_key"]


def prefix_key(block: BlockView) -> tuple[int, int, float]:
    """Fewest hits first; among equal hits the deepest first; then least recently used."""
    return (block.num_hits, -block.depth, block.last_access)


class PrefixAware(Policy):
    """Evict blocks no queued request will reuse first; within each group by hits, then
    depth (deep blocks before the prefix heads they hang from), then recency.

    1. Blocks that a request in the engine lists in its ``block_hashes`` are evicted only
       when every other candidate is gone: a queued request will hit them when admitted,
       saving their prefill. The policy remembers each request's hashes from
       ``on_request_arrived`` (which sees every arrival, whatever admission policy is
       configured before it) until ``on_request_finished``.
       Running requests reference their own blocks, so in practice the protected
       candidates are those of waiting requests.
    2. Fewest prefix-cache hits first: a block no request has come back to is the least
       likely to be hit again (as ``lfu``).
    3. Among equal hits, the deepest first: a block is only reachable through every block
       before it in its prompt, and the shallow blocks of a prompt (system prompt,
       template, early conversation turns) are the ones other requests share, while the
       deep ones are mostly one conversation's private tail.
    4. Then least recently used first.

    Cost: one dict update per prompt block when a request arrives and when it leaves; per
    eviction, one dict lookup per candidate and ``heapq.nsmallest`` over the unprotected
    ones (the protected ones are sorted only when they must go too).
    """

    fields = ("RequestView.block_hashes",)

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        # Bounded by the requests in the engine, whatever clients send: an entry per
        # request from its arrival until on_request_finished, which the engine calls
        # exactly once per request (rejected ones included), and _reuse counts only the
        # hashes those entries list. Hashes are ints: nothing a client sizes is kept.
        self._hashes: dict[str, tuple[int, ...]] = {}  # request id -> its block hashes
        self._reuse: dict[int, int] = {}  # block hash -> requests listing it

    @hookimpl
    def on_request_arrived(self, request: RequestView, engine: EngineView) -> None:
        self._forget(request.request_id)  # an id the engine reuses
        hashes = tuple(request.block_hashes)
        if hashes:
            self._hashes[request.request_id] = hashes
            reuse = self._reuse
            for h in hashes:
                reuse[h] = reuse.get(h, 0) + 1

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._forget(request.request_id)

    def _forget(self, request_id: str) -> None:
        hashes = self._hashes.pop(request_id, None)
        if hashes:
            reuse = self._reuse
            for h in hashes:
                left = reuse[h] - 1
                if left:
                    reuse[h] = left
                else:
                    del reuse[h]

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        reuse = self._reuse
        if not reuse:
            return heapq.nsmallest(num_blocks, candidates, key=prefix_key)
        unused: list[BlockView] = []
        reused: list[BlockView] = []
        for block in candidates:
            (reused if block.block_hash in reuse else unused).append(block)
        if len(unused) >= num_blocks:
            return heapq.nsmallest(num_blocks, unused, key=prefix_key)
        unused.sort(key=prefix_key)
        return unused + heapq.nsmallest(num_blocks - len(unused), reused, key=prefix_key)
