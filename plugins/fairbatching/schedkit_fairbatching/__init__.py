"""schedkit-fairbatching: batch formation fair between prefill and decode.

The entry point ``fairbatching`` in group ``schedkit.policies`` names ``FairBatching``;
schedkit instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_fairbatching.policy import FairBatching, StepFit

__all__ = ["FairBatching", "StepFit"]
