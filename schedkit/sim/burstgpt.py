"""Moved to ``schedkit.workload.formats.burstgpt`` (issue #36)."""

from schedkit._moved import alias_moved

alias_moved(__name__, "schedkit.workload.formats.burstgpt")
