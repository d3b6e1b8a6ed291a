"""Step reports keyed to the step they describe.

A synchronous scheduler schedules step N and then processes its results before step
N+1 is scheduled. A pipelined one does not: vLLM's async scheduling (the GPU default)
keeps a batch queue of two, so ``schedule()`` for step N+1 runs before
``update_from_output`` of step N, and SGLang's overlap loop processes a batch's results
one iteration late. A runtime that keeps "the pending report" in one slot overwrites
step N's report with step N+1's and reports one step twice and the other never.

``StepLedger`` keys each open report by the engine object that describes the step (the
``SchedulerOutput`` that ``update_from_output`` receives back, the batch that
``process_batch_result`` receives), so results close exactly the report of their own
step, in whatever order and however late they come. Durations are measured on the engine
view's clock (``EngineView.clock``), so a driver with its own clock (the contract suite's
step clock, the twin's simulated time) reports them on it, as the simulator does.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from schedkit.decisions import StepReport

__all__ = ["StepLedger"]


class StepLedger:
    """Open step reports by the step's key object, until the engine reports its results.

    ``limit`` bounds the open reports: an engine that drops a step without reporting it
    (an aborted batch) must not make the ledger grow; the oldest is discarded and
    counted in ``dropped``.
    """

    def __init__(self, limit: int = 64, clock: Callable[[], float] = time.perf_counter) -> None:
        # id(key) -> (key, started, report); the key is kept so its id is not reused.
        self._open: OrderedDict[int, tuple[Any, float, StepReport]] = OrderedDict()
        self.limit = limit
        self.dropped = 0
        self.clock = clock  # what durations are measured on: the engine view's clock

    def __len__(self) -> int:
        return len(self._open)

    def open(self, key: Any, report: StepReport, started: float | None = None) -> None:
        """Record ``report`` for the step ``key`` describes; ``started``: when the step began
        (on ``clock``), for the report's duration."""
        self._open[id(key)] = (key, self.clock() if started is None else started, report)
        while len(self._open) > self.limit:
            self._open.popitem(last=False)
            self.dropped += 1

    def close(self, key: Any) -> StepReport | None:
        """The report of step ``key`` with its duration set, or None if none is open."""
        entry = self._open.pop(id(key), None)
        if entry is None or entry[0] is not key:
            return None
        _, started, report = entry
        report.duration_s = max(0.0, self.clock() - started)
        return report
