"""schedkit-slo: earliest-deadline-first on TTFT deadlines, with early rejection.

The entry point ``slo`` in group ``schedkit.policies`` names ``DeadlineAware``; schedkit
instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_slo.backlog import Backlog, prefill_left
from schedkit_slo.policy import DeadlineAware, Targets

__all__ = ["Backlog", "DeadlineAware", "Targets", "prefill_left"]
