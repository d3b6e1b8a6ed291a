"""Where the SGLang adapter finds its schedkit config: environment variables
(``schedkit.adapter.environ``), read in every SGLang process that loads plugins (SGLang
has no config slot for plugins, and its scheduler processes inherit the launcher's
environment). Neither set: the plugin registers nothing, and SGLang is stock.
"""

from __future__ import annotations

from schedkit.adapter.environ import (
    CONFIG_VAR,
    OPTIONS_VAR,
    POLICY_VAR,
    config_environ,
    resolve_config,
    scoped_environ,
)

TIMING_VAR = "SCHEDKIT_SGLANG_TIMING"
"""``1``: the scheduler sends each request's queue/forward times back with its outputs
(``time_stats.has_timing_data``), which ``schedkit bench --engine sglang`` reads."""

__all__ = [
    "CONFIG_VAR",
    "OPTIONS_VAR",
    "POLICY_VAR",
    "TIMING_VAR",
    "config_environ",
    "resolve_config",
    "scoped_environ",
]
