"""What the simulated engine records for metrics, besides per-request records."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from schedkit.facade import PolicyFacade, by_hook
from schedkit.records import RunResult, TimelinePoint


class Recorder:
    """Inter-token gaps, time-weighted KV usage and a sampled timeline, kept cheaply.

    ``on_sample``, when set, is called with the clock and the requests in flight (waiting
    and running) at each timeline sample, once per ``interval_s`` of simulated time, never
    per step: how a command shows a run's progress (``schedkit.bench.progress``).
    """

    on_sample: Callable[[float, int], None] | None = None

    def __init__(self, result: RunResult, interval_s: float) -> None:
        self.result = result
        self.interval_s = interval_s
        self._gaps: dict[float, int] = {}  # gap rounded to the microsecond -> tokens
        # one token's gaps as the engine appends them, counted exactly (``count_gaps``)
        # and rounded once per distinct value at the end: many requests share a gap
        self.gaps: list[float] = []
        self._exact: Counter[float] = Counter()
        self._kv_seconds = 0.0  # integral of KV usage (fraction) over time
        self._next_sample = 0.0

    def token_gap(self, seconds: float, tokens: int) -> None:
        key = round(seconds, 6)
        self._gaps[key] = self._gaps.get(key, 0) + tokens

    def count_gap(self, seconds: float, tokens: int) -> None:
        """``tokens`` one-token gaps of exactly ``seconds`` (the decode lane's)."""
        self._exact[seconds] += tokens

    def count_gaps(self) -> None:
        """Count the listed one-token gaps (by exact value) and empty the list."""
        self._exact.update(self.gaps)
        self.gaps.clear()

    def kv_usage(self, duration: float, fraction: float) -> None:
        self._kv_seconds += duration * fraction

    def sample(self, clock: float, waiting: int, running: int, kv_usage: float) -> None:
        if clock >= self._next_sample:
            self.result.timeline.append(TimelinePoint(clock, waiting, running, kv_usage))
            self._next_sample = clock + self.interval_s
            if self.on_sample is not None:
                self.on_sample(clock, waiting + running)

    def finish(self, clock: float, steps: int, facade: PolicyFacade, started: float) -> RunResult:
        res = self.result
        res.duration_s = clock
        res.steps = steps
        self.count_gaps()
        gaps = self._gaps
        for seconds, tokens in self._exact.items():
            key = round(seconds, 6)
            gaps[key] = gaps.get(key, 0) + tokens
        self._exact.clear()
        res.itl = sorted(gaps.items())
        res.kv_usage_mean = self._kv_seconds / clock if clock > 0 else 0.0
        res.policy_errors = facade.error_count
        res.policy_errors_by_hook = by_hook(facade.errors)
        res.slow_hook_calls = by_hook(facade.slow_calls)
        res.wall_s = time.perf_counter() - started
        return res
