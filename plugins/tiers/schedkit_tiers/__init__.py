"""schedkit-tiers: online and offline traffic in one engine.

The entry point ``tiers`` in group ``schedkit.policies`` names ``Tiers``; schedkit
instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_tiers.policy import Tiers

__all__ = ["Tiers"]
