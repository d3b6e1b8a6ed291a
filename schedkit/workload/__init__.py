"""Workloads: the request model, loading, synthetic specs, one module per trace format.

Below the simulator and the bench, which both replay a :class:`Workload`; above the core.
``load_workload(spec)`` reads a bundled trace, a trace or request file, or a synthetic spec
(:mod:`schedkit.workload.loader`).
"""

from __future__ import annotations

from schedkit.workload.loader import KNOWN_WORKLOADS, load_workload
from schedkit.workload.model import TraceRequest, Workload

__all__ = ["KNOWN_WORKLOADS", "TraceRequest", "Workload", "load_workload"]
