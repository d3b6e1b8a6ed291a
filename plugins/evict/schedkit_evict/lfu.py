"""``lfu``: evict the cached blocks with the fewest prefix-cache hits first."""

from __future__ import annotations

from schedkit import BlockView, EngineView, Policy, hookimpl

__all__ = ["LeastFrequentlyUsed", "lfu_key"]


def lfu_key(block: BlockView) -> tuple[int, float]:
    """Fewest hits first; least recently used first among equal hits."""
    return (block.num_hits, block.last_access)


class LeastFrequentlyUsed(Policy):
    """Least frequently used: fewest ``num_hits`` first, ties least recently used first.

    A block's hits count the requests that found it in the prefix cache, so blocks of
    prefixes many requests share (system prompts, few-shot templates, a conversation's
    history) outlive one-off prompts, even when a burst of new prompts is more recent.
    Hits never decay: a prefix that was popular long ago keeps its place until blocks
    with as many hits compete. Ties keep the engine's order, which frees a request's
    blocks tail first, so a prefix's deepest blocks go before its head.

    A key hook: the engine keeps the evictable blocks in key order (the simulator ranks
    every evictable block, with no eviction window; docs/hooks.md, ``eviction_key``).
    The key reads only a block's hits and last access, so engines may key blocks alike
    in those once (``eviction_key_reads``).
    """

    eviction_key_reads = ("num_hits", "last_access")

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> tuple[int, float]:
        return lfu_key(block)
