"""Moved to ``schedkit.bench.real_arm`` (issue #36): the real-engine arm is bench harness,
not part of the kit an engine's scheduler process loads."""

from schedkit._moved import alias_moved

alias_moved(__name__, "schedkit.bench.real_arm")
