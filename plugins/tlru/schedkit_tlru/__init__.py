"""schedkit-tlru: tail-optimized LRU eviction of the prefix cache.

The entry point ``tlru`` in group ``schedkit.policies`` names ``TailOptimizedLRU``;
schedkit instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_tlru.policy import TailOptimizedLRU

__all__ = ["TailOptimizedLRU"]
