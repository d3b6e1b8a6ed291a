"""Prometheus metrics of the schedkit policies running inside vLLM's scheduler.

Created with the first ``VllmRuntime`` in a process (so a scheduler without a schedkit
config never imports ``prometheus_client`` nor registers anything) in the default
registry, which vLLM's API server serves on ``/metrics``. The scheduler runs in the
engine-core process, not the API server, so the API server only sees these when
``PROMETHEUS_MULTIPROC_DIR`` names a directory shared by both (``schedkit serve vllm``
sets one; vLLM itself does when ``--api-server-count`` > 1) or when the engine core runs
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

The series and their labels: ``schedkit.prometheus`` (shared by the engine adapters).
"""

from __future__ import annotations

from schedkit.prometheus import HOOKS, SchedkitMetrics, try_create

__all__ = ["HOOKS", "SchedkitMetrics", "try_create"]
