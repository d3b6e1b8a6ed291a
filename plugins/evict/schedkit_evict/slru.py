"""``slru``: segmented LRU, a probationary and a protected segment."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field
from schedkit import BlockView, EngineView, Policy, PolicyOptions, hookimpl

__all__ = ["SegmentedLRU"]


def _last_access(block: BlockView) -> float:
    return block.last_access


class SegmentedLRU(Policy):
    """Segmented LRU: blocks hit at least ``promote_hits`` times are protected.

    Every probationary block (fewer hits) is evicted before any protected one; within a
    segment, least recently used first. The protected segment holds at most
    ``protected_fraction`` of the evictable blocks, its most recently used ones; older
    protected blocks are demoted and compete with the probationary ones by recency, so
    that prefixes popular long ago eventually leave (Karedla et al., IEEE Computer 1994).
    A one-off prompt therefore never displaces a prefix that requests came back to,
    however many one-off prompts arrive.
    """

    class Options(PolicyOptions):
        promote_hits: int = Field(
            default=1,
            ge=1,
            le=1_000_000,
            description="Prefix-cache hits that move a block into the protected segment.",
        )
        protected_fraction: float = Field(
            default=0.8,
            gt=0.0,
            le=1.0,
            description="Largest share of the evictable blocks the protected segment keeps.",
        )

    options: Options

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        promote = self.options.promote_hits
        probation: list[BlockView] = []
        protected: list[BlockView] = []
        for block in candidates:
            (protected if block.num_hits >= promote else probation).append(block)
        protected.sort(key=_last_access)  # stable; already sorted when candidates are LRU
        keep = int(self.options.protected_fraction * len(candidates))
        demoted = len(protected) - keep
        if demoted > 0:
            probation.extend(protected[:demoted])
            protected = protected[demoted:]
        probation.sort(key=_last_access)
        order = probation if len(probation) >= num_blocks else probation + protected
        return order[:num_blocks]
