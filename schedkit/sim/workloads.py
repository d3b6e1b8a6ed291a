"""Moved to ``schedkit.workload`` (issue #36)."""

from schedkit._moved import warn_moved

warn_moved(__name__, "schedkit.workload")

from schedkit.workload.loader import KNOWN_WORKLOADS, load_workload  # noqa: E402
from schedkit.workload.model import TraceRequest, Workload  # noqa: E402

__all__ = ["KNOWN_WORKLOADS", "TraceRequest", "Workload", "load_workload"]
