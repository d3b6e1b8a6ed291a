"""``prefix-aware``: keep the heads of prefixes, evict deep never-reused tails first;
``prefix-aware-queued``: and the blocks that queued requests will reuse."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from schedkit import BlockView, EngineView, Policy, PolicyOptions, RequestView, hookimpl

__all__ = ["PrefixAware", "QueuedPrefixAware", "prefix_key"]


def prefix_key(block: BlockView) -> tuple[int, int, float]:
    """Fewest hits first; among equal hits the deepest first, by depth doubling (blocks
    at depth 8-15 before those at 4-7); then least recently used."""
    return (block.num_hits, -block.depth_class, block.last_access)


class PrefixAware(Policy):
    """Evict by hits, then depth (deep blocks before the prefix heads they hang from),
    then recency.

    1. Fewest prefix-cache hits first: a block no request has come back to is the least
       likely to be hit again (as ``lfu``).
    2. Among equal hits, the deepest first, by classes of doubling depth (1, 2-3, 4-7,
       ...). A block is only reachable through every block before it in its prompt, and
       the shallow blocks of a prompt (system prompt, template, early conversation
       turns) are the ones other requests share, while the deep ones are mostly one
       conversation's private tail. Classes (``BlockView.depth_class``) rather than exact
       depths: with exact depths, evictions interleave block by block between every run
       of blocks in the cache (36-55x LRU's replay time on mooncake-conv); with classes
       the engine ranks a run of blocks a class at a time, for a hit rate 0.05 points
       lower (benchmarks/speed/RESULTS.md).
    3. Then least recently used first.

    A key hook reading hits, depth class and last access (``eviction_key_reads``): the
    engine keeps the evictable blocks in key order, with no eviction window.
    """

    eviction_key_reads = ("num_hits", "depth_class", "last_access")

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> tuple[int, int, float]:
        return prefix_key(block)


class QueuedPrefixAware(Policy):
    """``prefix-aware``, and blocks that a request in the engine lists in its
    ``block_hashes`` are evicted only when every other candidate is gone: a queued request
    will hit them when admitted, saving their prefill.

    The policy remembers each request's hashes from ``on_request_arrived`` (which sees
    every arrival, whatever admission policy is configured before it) until
    ``on_request_finished``. Running requests reference their own blocks, so in practice
    the protected candidates are those of waiting requests. Which blocks are protected
    changes while they stay cached, so this is a list hook (``select_evictions``): each
    eviction ranks the candidates the engine offers (its eviction window).

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
