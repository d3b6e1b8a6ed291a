"""Moved to ``schedkit.bench.engine_requests`` (issue #36): "replay" names one thing, running
a workload through an engine; this module builds the requests a real engine is given."""

from schedkit._moved import alias_moved

alias_moved(__name__, "schedkit.bench.engine_requests")
