"""Prometheus metrics of schedkit policies running inside an engine's scheduler.

Shared by the engine adapters. ``try_create`` is called with the first schedkit runtime
in a process, so an engine without a schedkit config never imports ``prometheus_client``
nor registers anything. The families live in the default registry, which the engines'
HTTP servers serve on ``/metrics`` (each adapter documents how the scheduler process's
series reach its server).

Every series carries ``policy``: the configured composition (``"slo+vtc"``), except
``schedkit_policy_errors_total`` and ``schedkit_hook_over_budget_total``, whose ``policy``
is the one that failed or was slow.

- ``schedkit_policy_decisions_total{policy,hook}``: hook calls answered with a decision
  (not "no opinion" and not the engine default).
- ``schedkit_hook_latency_seconds{policy,hook}``: time in each hook call, through the facade.
- ``schedkit_rejections_total{policy,reason}``: requests rejected at admission. The label is
  the rejection's ``code`` (``Admission.reject(why, code)``), else its reason with numbers
  replaced by ``N`` and cut to 64 characters; at most ``MAX_REASON_LABELS`` labels from
  texts per policy, later ones counted as ``other``, so values a client chose and a
  policy quoted cannot grow the series.
- ``schedkit_preemption_victims_total{policy}``: victims the policy chose and the engine
  preempted; ``schedkit_preemption_victims_skipped_total{policy}``: victims named that
  the engine could not preempt at that point.
- ``schedkit_evictions_total{policy}``: cached KV blocks (vLLM) or radix-tree nodes
  (SGLang) evicted by the policy's choice.
- ``schedkit_policy_errors_total{policy,hook}``: hook calls that raised or answered
  nonsense (the facade then used the next policy or the engine's default).
- ``schedkit_hook_over_budget_total{policy,hook}``: hook calls longer than the config's
  ``hook_budget_ms`` (only with a budget set; ``policy`` is the one that was slow).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["HOOKS", "MAX_REASON_LABELS", "NAMES", "SchedkitMetrics", "reason_label", "try_create"]

MAX_REASON_LABELS = 32
NAMES = {  # family -> metric name (counters are exported with _total)
    "decisions": "schedkit_policy_decisions",
    "latency": "schedkit_hook_latency_seconds",
    "rejections": "schedkit_rejections",
    "victims": "schedkit_preemption_victims",
    "victims_skipped": "schedkit_preemption_victims_skipped",
    "evictions": "schedkit_evictions",
    "errors": "schedkit_policy_errors",
    "over_budget": "schedkit_hook_over_budget",
}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reason_label(reason: str, code: str = "") -> str:
    """The metric label of a rejection: its code, else its reason with numbers as N."""
    return code or _NUMBER.sub("N", reason)[:64] or "unspecified"


HOOKS = (
    "on_request_arrived",
    "admit_request",
    "order_waiting",
    "plan_batch",
    "select_victims",
    "select_evictions",
    "on_step_finished",
    "on_request_finished",
)
# Hook calls take microseconds to milliseconds; a 256-request sort is ~0.1 ms.
LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1)

_families: dict[str, Any] | None = None


def _create_families() -> dict[str, Any]:
    """The metric families, registered once per process (several schedulers may share)."""
    global _families
    if _families is None:
        from prometheus_client import Counter, Histogram

        _families = {
            "decisions": Counter(
                NAMES["decisions"],
                "Hook calls answered with a decision by the schedkit policies.",
                ["policy", "hook"],
            ),
            "latency": Histogram(
                NAMES["latency"],
                "Time spent in each schedkit policy hook call.",
                ["policy", "hook"],
                buckets=LATENCY_BUCKETS,
            ),
            "rejections": Counter(
                NAMES["rejections"],
                "Requests rejected at admission by a schedkit policy, by reason.",
                ["policy", "reason"],
            ),
            "victims": Counter(
                NAMES["victims"],
                "Preemption victims chosen by a schedkit policy and preempted by the engine.",
                ["policy"],
            ),
            "victims_skipped": Counter(
                NAMES["victims_skipped"],
                "Victims named by a policy that the engine could not preempt at that point.",
                ["policy"],
            ),
            "evictions": Counter(
                NAMES["evictions"],
                "Cached KV blocks or prefix-tree nodes evicted by a schedkit policy's choice.",
                ["policy"],
            ),
            "errors": Counter(
                NAMES["errors"],
                "Schedkit policy hook calls that raised or returned an invalid decision.",
                ["policy", "hook"],
            ),
            "over_budget": Counter(
                NAMES["over_budget"],
                "Schedkit policy hook calls that took longer than the hook budget.",
                ["policy", "hook"],
            ),
        }
    return _families


class SchedkitMetrics:
    """One scheduler's handles on the metric families, labelled children bound once."""

    def __init__(self, policy: str, hooks: frozenset[str]) -> None:
        families = _create_families()
        self.policy = policy
        self._families = families
        # Bound once: .labels() is a dict lookup under a lock on every call otherwise.
        # Series for every implemented hook exist from the start (at zero).
        self._decisions = {h: families["decisions"].labels(policy, h) for h in hooks}
        self._latency = {h: families["latency"].labels(policy, h) for h in hooks}
        self._victims = families["victims"].labels(policy)
        self._victims_skipped = families["victims_skipped"].labels(policy)
        self._evictions = families["evictions"].labels(policy)
        self._rejections: dict[str, Any] = {}
        self._text_labels = 0  # labels made from reason texts, bounded
        self._seen: dict[tuple[str, str, str], int] = {}  # (family, policy, hook) -> count

    def hook(self, hook: str, seconds: float, decided: bool) -> None:
        """One hook call through the facade took ``seconds``; ``decided``: a policy answered.
        ``hook`` is the facade method the engine called: ``order_waiting`` also serves
        ``waiting_key`` policies, so its series is made on first use."""
        latency = self._latency.get(hook)
        if latency is None:
            latency = self._latency[hook] = self._families["latency"].labels(self.policy, hook)
            self._decisions[hook] = self._families["decisions"].labels(self.policy, hook)
        latency.observe(seconds)
        if decided:
            self._decisions[hook].inc()

    def rejection(self, label: str, coded: bool = False) -> None:
        """Count a rejection under ``label`` (:func:`reason_label`). Labels taken from
        reason texts (not a policy's ``code``) stop at ``MAX_REASON_LABELS``; later ones
        count under ``other``."""
        child = self._rejections.get(label)
        if child is None:
            if not coded and self._text_labels >= MAX_REASON_LABELS:
                label = "other"
                child = self._rejections.get(label)
            if child is None:
                child = self._rejections[label] = self._families["rejections"].labels(
                    self.policy, label
                )
                self._text_labels += not coded
        child.inc()

    def victim_placed(self) -> None:
        self._victims.inc()

    def victims_skipped(self, n: int) -> None:
        self._victims_skipped.inc(n)

    def evicted(self, n: int) -> None:
        self._evictions.inc(n)

    def sync_errors(self, errors: Mapping[tuple[str, str], int]) -> None:
        """Count the facade's new errors (its counter, keyed by (policy, hook))."""
        self._sync("errors", errors)

    def sync_slow_calls(self, slow: Mapping[tuple[str, str], int]) -> None:
        """Count the facade's new calls over the hook budget (keyed by (policy, hook))."""
        self._sync("over_budget", slow)

    def _sync(self, family: str, counts: Mapping[tuple[str, str], int]) -> None:
        for (policy, hook), count in counts.items():
            key = (family, policy, hook)
            new = count - self._seen.get(key, 0)
            if new > 0:
                self._families[family].labels(policy, hook).inc(new)
                self._seen[key] = count


def try_create(policy: str, hooks: frozenset[str]) -> SchedkitMetrics | None:
    """Metrics for one scheduler, or None where ``prometheus_client`` is missing."""
    try:
        return SchedkitMetrics(policy, hooks)
    except ImportError:
        return None
