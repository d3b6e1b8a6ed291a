"""``lfu``: evict the cached blocks with the fewest prefix-cache hits first."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import attrgetter

from schedkit import BlockView, EngineView, Policy, hookimpl

__all__ = ["LeastFrequentlyUsed", "lfu_key"]

# Fewest hits first; least recently used first among equal hits. attrgetter builds the
# key in C: the key is computed once per candidate, and there may be thousands per call.
lfu_key = attrgetter("num_hits", "last_access")


class LeastFrequentlyUsed(Policy):
    """Least frequently used: fewest ``num_hits`` first, ties least recently used first.

    A block's hits count the requests that found it in the prefix cache, so blocks of
    prefixes many requests share (system prompts, few-shot templates, a conversation's
    history) outlive one-off prompts, even when a burst of new prompts is more recent.
    Hits never decay: a prefix that was popular long ago keeps its place until blocks
    with as many hits compete. Ties keep the engine's order, which frees a request's
    blocks tail first, so a prefix's deepest blocks go before its head.
    """

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        # nsmallest is stable (equal keys keep candidate order) and O(n log k).
        return heapq.nsmallest(num_blocks, candidates, key=lfu_key)
