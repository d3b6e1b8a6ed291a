"""schedkit-hrrn: highest response ratio next, SGLang's ``hrrn`` as a schedkit policy.

The entry point ``hrrn`` in group ``schedkit.policies`` names ``HighestResponseRatioNext``;
schedkit instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_hrrn.policy import HighestResponseRatioNext, uncached_tokens

__all__ = ["HighestResponseRatioNext", "uncached_tokens"]
