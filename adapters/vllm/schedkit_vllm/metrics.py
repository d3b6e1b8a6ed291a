"""Prometheus metrics of the schedkit policies running inside vLLM's scheduler.

Created with the first ``SchedkitRuntime`` in a process (so a scheduler without a schedkit
config never imports ``prometheus_client`` nor registers anything) in the default
registry, which vLLM's API server serves on ``/metrics``. The scheduler runs in the
engine-core process, not the API server, so the API server only sees these when
``PROMETHEUS_MULTIPROC_DIR`` names a directory shared by both (``schedkit serve vllm``
sets one; vLLM itself does when ``--api-server-count`` > 1) or when the engine core runs
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

Every series carries ``policy``: the configured composition (``"slo+vtc"``), except
``schedkit_policy_errors_total``, whose ``policy`` is the one that failed.

- ``schedkit_policy_decisions_total{policy,hook}``: hook calls answered with a decision
  (not "no opinion" and not the engine default).
- ``schedkit_hook_latency_seconds{policy,hook}``: time in each hook call, through the facade.
- ``schedkit_rejections_total{policy,reason}``: requests rejected at admission.
- ``schedkit_preemption_victims_total{policy}``: victims the policy placed for vLLM to
  preempt; ``schedkit_preemption_victims_skipped_total{policy}``: victims named that vLLM
  had already granted tokens this step.
- ``schedkit_evictions_total{policy}``: cached KV blocks evicted by the policy's choice.
- ``schedkit_policy_errors_total{policy,hook}``: hook calls that raised or answered
  nonsense (the facade then used the next policy or vLLM's default).
"""

from __future__ import annotations

from schedkit.prometheus import HOOKS, SchedkitMetrics, try_create

__all__ = ["HOOKS", "SchedkitMetrics", "try_create"]
