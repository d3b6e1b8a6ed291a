"""``slru``: segmented LRU, a probationary and a protected segment."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from schedkit import BlockView, EngineView, Policy, PolicyOptions, hookimpl

__all__ = ["SegmentedLRU", "slru_key"]


def slru_key(block: BlockView, promote_hits: int = 1, protect_s: float = 300.0) -> tuple[float]:
    """The block's last access, ``protect_s`` later when it is protected."""
    if block.num_hits >= promote_hits:
        return (block.last_access + protect_s,)
    return (block.last_access,)


class SegmentedLRU(Policy):
    """Segmented LRU: blocks hit at least ``promote_hits`` times are protected.

    Within each segment, least recently used first. A protected block ranks as if it had
    been used ``protect_s`` seconds later than it was: it is evicted after every
    probationary block used less than ``protect_s`` seconds after it, so a one-off prompt
    never displaces a prefix that requests came back to within that time, however many
    one-off prompts arrive. A prefix that stops being used leaves once the probationary
    blocks are that much newer: the demotion of Karedla et al. (IEEE Computer 1994), by
    age instead of by a share of the cache.

    A key hook that reads only a block's hits and last access (``eviction_key_reads``):
    the engine keeps the evictable blocks in key order, with no eviction window
    (docs/hooks.md, ``eviction_key``). schedkit-evict 0.1's ``protected_fraction`` (a
    share of the evictable blocks, which no key of one block can express) is gone.
    """

    class Options(PolicyOptions):
        promote_hits: int = Field(
            default=1,
            ge=1,
            le=1_000_000,
            description="Prefix-cache hits that move a block into the protected segment.",
        )
        protect_s: float = Field(
            default=300.0,
            ge=0.0,
            le=1e9,
            allow_inf_nan=False,
            description="Seconds of recency a protected block is credited against "
            "probationary ones.",
        )

        @model_validator(mode="before")
        @classmethod
        def _replaced(cls, data: Any) -> Any:
            if isinstance(data, dict) and "protected_fraction" in data:
                raise ValueError(
                    "protected_fraction was removed in schedkit-evict 0.2: slru is now an "
                    "eviction_key policy and a share of the evictable blocks is not a "
                    "property of one block; set protect_s (seconds a protected block is "
                    "credited, default 300) instead"
                )
            return data

    options: Options
    eviction_key_reads = ("num_hits", "last_access")

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> tuple[float]:
        return slru_key(block, self.options.promote_hits, self.options.protect_s)
