"""``AdapterRuntime``: the per-scheduler glue between an engine and the policy facade.

An adapter keeps one per scheduler (``scheduler.schedkit``) and subclasses it with what
only its engine needs. The runtime never decides anything: decisions come from the
facade, defaults are the engine's own behaviour. Everything that is the same on every
engine lives here: hook timing and decision counts (one place that feeds the Prometheus
metrics), admission and rejection counts, finish bookkeeping, step reports through a
``StepLedger``, and the error and victim counters the bench and ``/metrics`` read.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from schedkit.adapter.recording import StepRecorder
from schedkit.adapter.steps import StepLedger
from schedkit.decisions import ADMIT, StepReport
from schedkit.facade import PolicyFacade
from schedkit.prometheus import SchedkitMetrics, reason_label, try_create
from schedkit.views import EngineView, RequestView

__all__ = ["REJECTED", "AdapterRuntime"]

log = logging.getLogger("schedkit.adapter")

REJECTED = "rejected"
MAX_KEPT_REASONS = 256  # distinct rejection texts counted by text; later ones as below
OTHER_REASONS = "(other reasons)"


class AdapterRuntime:
    """Facade, engine view, counters and step ledger of one engine scheduler."""

    def __init__(
        self, facade: PolicyFacade, engine: EngineView, recorder: StepRecorder | None = None
    ) -> None:
        self.facade = facade
        self.recorder = recorder  # record_steps: one CSV row per step
        self.engine = engine
        self.rejections: Counter[str] = Counter()  # by reason, MAX_KEPT_REASONS at most
        self.finished: Counter[str] = Counter()  # by schedkit finish reason
        self.num_victims_placed = 0
        self.num_victims_skipped = 0  # named by the policy but not preemptable then
        self.num_evicted_by_policy = 0
        self.steps = StepLedger(clock=lambda: self.engine.clock)
        self.metrics: SchedkitMetrics | None = try_create(facade.label, facade.implemented)
        self._errors_seen = 0
        self._slow_seen = 0

    @property
    def policy_errors(self) -> int:
        return int(self.facade.error_count)

    def timed(self, hook: str, started: float, decided: bool) -> None:
        """A hook call through the facade that began at ``started`` has returned."""
        if self.metrics is not None:
            self.metrics.hook(hook, time.perf_counter() - started, decided)

    # -- admission ------------------------------------------------------------------

    def admission_reason(self, view: RequestView) -> str | None:
        """The rejection reason for a new request, or None to admit it."""
        started = time.perf_counter()
        decision = self.facade.admit(view, self.engine)
        hook = "admit_request" if self.facade.has_admit else "on_request_arrived"
        self.timed(hook, started, decision is not ADMIT)
        if decision.admitted:
            return None
        reason = str(decision.reason)
        if reason in self.rejections or len(self.rejections) < MAX_KEPT_REASONS:
            self.rejections[reason] += 1
        else:  # client-chosen text must not grow this without bound
            self.rejections[OTHER_REASONS] += 1
        if self.metrics is not None:
            self.metrics.rejection(reason_label(reason, decision.code), bool(decision.code))
        log.info("schedkit: rejected request %s: %s", view.request_id, reason)
        return reason

    # -- steps ----------------------------------------------------------------------

    @property
    def tracks_steps(self) -> bool:
        """Whether steps are reported: to observing policies, or to the recorder."""
        return self.facade.has_step_observer or self.recorder is not None

    def open_step(self, key: Any, report: StepReport, started: float | None = None) -> None:
        """Step ``key`` (the engine's object for it) was scheduled as ``report`` says."""
        self.steps.open(key, report, started)
        if self.recorder is not None:
            self.recorder.opened(key, report)

    def close_step(self, key: Any) -> None:
        """The engine processed the results of step ``key``: report it to the policies."""
        report = self.steps.close(key)
        if report is None:
            return
        if self.recorder is not None:
            self.recorder.closed(key, report, self.engine)
        if not self.facade.has_step_observer:
            return
        started = time.perf_counter()
        self.facade.step_finished(report, self.engine)
        self.timed("on_step_finished", started, False)

    def close(self) -> None:
        """The engine shuts down: finish the step file."""
        if self.recorder is not None:
            self.recorder.close()

    # -- preemption and eviction ------------------------------------------------------

    def victims_placed(self, n: int = 1) -> None:
        self.num_victims_placed += n
        if self.metrics is not None:
            for _ in range(n):
                self.metrics.victim_placed()

    def victims_skipped(self, n: int) -> None:
        self.num_victims_skipped += n
        if self.metrics is not None:
            self.metrics.victims_skipped(n)

    def evicted(self, n: int) -> None:
        self.num_evicted_by_policy += n
        if self.metrics is not None:
            self.metrics.evicted(n)

    # -- finishing ------------------------------------------------------------------

    def request_finished(self, view: RequestView, reason: str) -> None:
        """A request left the engine for ``reason``; the adapter calls this once per request."""
        self.finished[reason] += 1
        if self.facade.has_finish_observer:
            started = time.perf_counter()
            self.facade.request_finished(view, reason, self.engine)
            self.timed("on_request_finished", started, False)
        if self.facade.implemented:  # a policy may keep the view: it reads the last state
            freeze = getattr(view, "freeze", None)
            if freeze is not None:
                freeze()

    # -- metrics --------------------------------------------------------------------

    def sync_metrics(self) -> None:
        """Push the facade's new error and slow-call counts to the metrics (cheap when
        there are none)."""
        metrics, facade = self.metrics, self.facade
        if metrics is None:
            return
        if facade.errors and facade.error_count != self._errors_seen:
            self._errors_seen = facade.error_count
            metrics.sync_errors(facade.errors)
        if facade.slow_calls and facade.slow_call_count != self._slow_seen:
            self._slow_seen = facade.slow_call_count
            metrics.sync_slow_calls(facade.slow_calls)


def report_of(
    scheduled: Sequence[RequestView],
    counts: Sequence[int],
    prefill: int,
    decode: int,
    preempted: Sequence[RequestView] = (),
) -> StepReport:
    """A one-step report (its duration is set when the step closes)."""
    return StepReport(
        num_steps=1,
        duration_s=0.0,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        scheduled=scheduled,
        num_scheduled_tokens=counts,
        preempted=preempted,
    )
