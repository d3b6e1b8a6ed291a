"""schedkit-evict: prefix-cache eviction policies.

Entry points in group ``schedkit.policies``: ``lfu`` names ``LeastFrequentlyUsed``,
``slru`` ``SegmentedLRU``, ``prefix-aware`` ``PrefixAware`` (key hooks, ``eviction_key``)
and ``prefix-aware-queued`` ``QueuedPrefixAware`` (a list hook, ``select_evictions``).
The engine default they replace is least recently used first (``fcfs`` implements no
eviction hook).
"""

from __future__ import annotations

from schedkit_evict.lfu import LeastFrequentlyUsed, lfu_key
from schedkit_evict.prefix_aware import PrefixAware, QueuedPrefixAware, prefix_key
from schedkit_evict.slru import SegmentedLRU, slru_key

__all__ = [
    "LeastFrequentlyUsed",
    "PrefixAware",
    "QueuedPrefixAware",
    "SegmentedLRU",
    "lfu_key",
    "prefix_key",
    "slru_key",
]
