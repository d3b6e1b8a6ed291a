"""schedkit-cacheaware: vLLM 0.34's cache-aware admission (PR #54625) as a schedkit policy.

The entry point ``cache-aware`` in group ``schedkit.policies`` names
``CacheAwareAdmission``; schedkit instantiates it with validated options when a config
selects it.
"""

from __future__ import annotations

from schedkit_cacheaware.policy import CacheAwareAdmission

__all__ = ["CacheAwareAdmission"]
