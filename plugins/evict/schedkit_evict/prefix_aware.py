"""``prefix-aware``: keep the heads of reused prefixes, evict never-reused tails first."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from schedkit import BlockView, EngineView, Policy, hookimpl

__all__ = ["PrefixAware", "prefix_key"]


def prefix_key(block: BlockView) -> tuple[int, int, float]:
    """Fewest hits first; among equal hits the deepest first; then least recently used."""
    return (block.num_hits, -block.depth, block.last_access)


class PrefixAware(Policy):
    """Evict by hits, then depth: deep blocks before the prefix heads they hang from.

    The heuristic, from what a ``BlockView`` says (``num_hits``, ``depth``,
    ``last_access``) and nothing else:

    1. fewest prefix-cache hits first: a block no request has come back to is the least
       likely to be hit again (as ``lfu``);
    2. among equal hits, the deepest first: a block is only reachable through every
       block before it in its prompt, and the shallow blocks of a prompt (system prompt,
       template, early conversation turns) are the ones other requests share, while the
       deep ones are mostly one conversation's private tail;
    3. then least recently used first.

    What it cannot do: protect the blocks that requests *already waiting* will hit. A
    ``RequestView`` carries no block hashes, so no policy can see which cached blocks a
    queued request's prompt starts with; see the README for the view that would allow it.
    """

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        return heapq.nsmallest(num_blocks, candidates, key=prefix_key)
