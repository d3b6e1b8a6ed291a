"""schedkit-evict: prefix-cache eviction policies (``select_evictions``).

Entry points in group ``schedkit.policies``: ``lfu`` names ``LeastFrequentlyUsed``,
``slru`` ``SegmentedLRU`` and ``prefix-aware`` ``PrefixAware``. The engine default they
replace is least recently used first (``fcfs`` implements no eviction hook).
"""

from __future__ import annotations

from schedkit_evict.lfu import LeastFrequentlyUsed, lfu_key
from schedkit_evict.prefix_aware import PrefixAware, prefix_key
from schedkit_evict.slru import SegmentedLRU

__all__ = ["LeastFrequentlyUsed", "PrefixAware", "SegmentedLRU", "lfu_key", "prefix_key"]
