"""Order statistics, fairness, and paired confidence intervals under dependence (numpy).

Percentiles follow numpy's default (``method="linear"``). Weighted percentiles treat each
weight as a repeat count, so ``weighted_percentile([(x, 3)], q)`` equals
``percentile([x, x, x], q)``.

Comparing two arms: every arm replays the identical request stream, so a comparison
pairs each request with itself (pairing removes the request-mix noise the arms share).
Queueing makes neighbouring requests' latencies strongly dependent: one long prompt
delays everything behind it, so intervals that treat requests as independent are far
too narrow. The bench's intervals come from :func:`sectioned_diff` (stretches of
consecutive arrivals, sized by the data's dependence length, :func:`block_length`);
``paired_bootstrap`` in ``benchmarks/stats/bootstrap.py`` (a circular block bootstrap,
Politis and Romano, 1992; it resamples through :class:`Draws` and ``Statistic.resampled``) is
the reference method it was checked against. Their coverage:
``benchmarks/stats/interval_coverage.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

# ---------------------------------------------------------------------------
# percentiles and summaries
# ---------------------------------------------------------------------------


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q!r} is outside 0..100; pass a percentage")


def percentile(sorted_values: Sequence[float] | FloatArray, q: float) -> float:
    """The ``q``-th percentile (0..100) of ``sorted_values``, as ``np.percentile``."""
    _check_q(q)
    if len(sorted_values) == 0:
        raise ValueError("percentile of no values; pass at least one value")
    return float(np.percentile(np.asarray(sorted_values, dtype=np.float64), q))


def _counted_percentile(
    values: npt.NDArray[np.float64], cum: npt.NDArray[np.float64], q: float
) -> float:
    """Percentile of the multiset where ascending ``values[i]`` occurs ``cum[i] - cum[i-1]``
    times (numpy's linear interpolation between the two neighbouring ranks)."""
    last = values.size - 1
    pos = (cum[-1] - 1) * (q / 100.0)
    lo = math.floor(pos)
    hi_rank = min(lo + 1, math.ceil(cum[-1] - 1))
    a = float(values[min(int(np.searchsorted(cum, lo, side="right")), last)])
    b = float(values[min(int(np.searchsorted(cum, hi_rank, side="right")), last)])
    t = float(pos - lo)
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def _weighted(
    pairs: Iterable[tuple[float, float]] | FloatArray,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Values and weights, ascending by value then weight, without zero weights; ``pairs``
    may be an array of rows of two."""
    if isinstance(pairs, np.ndarray):
        data = pairs.reshape(-1, 2)
        data = data[data[:, 1] > 0]
    else:
        data = np.array([(v, w) for v, w in pairs if w > 0], dtype=np.float64).reshape(-1, 2)
    order = np.lexsort((data[:, 1], data[:, 0]))
    return data[order, 0], data[order, 1]


def weighted_percentile(pairs: Iterable[tuple[float, float]], q: float) -> float:
    """The ``q``-th percentile of ``(value, weight)`` pairs, each weight a repeat count."""
    _check_q(q)
    values, weights = _weighted(pairs)
    if not values.size:
        raise ValueError("weighted percentile of no positive weights; pass at least one")
    return _counted_percentile(values, np.cumsum(weights), q)


def summary(values: Iterable[float] | FloatArray) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of ``values``; every entry is None when empty."""
    if isinstance(values, np.ndarray):
        data = np.ascontiguousarray(values, dtype=np.float64)
    else:
        data = np.fromiter(values, dtype=np.float64)
    if not data.size:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {"mean": float(data.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def weighted_summary(
    pairs: Iterable[tuple[float, float]] | FloatArray,
) -> dict[str, float | None]:
    """:func:`summary` for ``(value, weight)`` pairs (or an array of such rows): weighted
    mean and percentiles."""
    values, weights = _weighted(pairs)
    if not values.size:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    cum = np.cumsum(weights)
    return {
        "mean": float(np.dot(values, weights) / cum[-1]),
        "p50": _counted_percentile(values, cum, 50),
        "p90": _counted_percentile(values, cum, 90),
        "p99": _counted_percentile(values, cum, 99),
    }


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1.0 when all equal, 1/n at worst.

    All-zero values are perfectly fair (1.0).
    """
    if not values:
        raise ValueError("Jain's index of no values; pass at least one value")
    data = np.asarray(values, dtype=np.float64)
    squares = float(np.dot(data, data))
    if squares == 0.0:
        return 1.0
    return float(data.sum()) ** 2 / (data.size * squares)


# ---------------------------------------------------------------------------
# statistics a bootstrap can resample
# ---------------------------------------------------------------------------

FloatArray = npt.NDArray[np.float64]
Counts = npt.NDArray[np.int32]  # (requests + 1, resamples): draws of each request; last row 0


class Draws:
    """A chunk of bootstrap resamples: ``counts[i, k]`` is how often resample ``k`` drew
    request ``i`` (request-major, so gathering requests copies whole rows; an extra zero
    row at the end pads gathers). Caches what several statistics of one arm share."""

    __slots__ = ("_orders", "_real", "_sorted", "counts")

    def __init__(self, counts: Counts, orders: dict[int, npt.NDArray[np.intp]]) -> None:
        self.counts = counts
        self._orders = orders  # id(values) -> ascending order of its samples; kept by the caller
        self._sorted: dict[int, Ranked] = {}
        self._real: FloatArray | None = None

    @property
    def resamples(self) -> int:
        return int(self.counts.shape[1])

    def dot(self, weights: FloatArray) -> FloatArray:
        """Per resample, the sum of ``weights`` over its draws (NaN weights count 0)."""
        if self._real is None:  # int @ float would convert the counts on every call
            self._real = self.counts[:-1].astype(np.float64)
        return np.asarray(np.nan_to_num(weights) @ self._real, dtype=np.float64)

    def ranked(self, values: FloatArray) -> Ranked:
        """``values``' samples ascending, with every resample's draws counted in that
        order (NaN samples left out); shared by the statistics of one arm."""
        key = id(values)
        if key not in self._sorted:
            if key not in self._orders:
                present = np.flatnonzero(~np.isnan(values))
                self._orders[key] = present[np.argsort(values[present], kind="stable")]
            self._sorted[key] = Ranked(values, self._orders[key], self.counts)
        return self._sorted[key]


class Ranked:
    """One arm's samples in ascending order and the resamples' draws of them.

    Finding a rank needs running draw counts, but only near the few ranks asked for, so
    the counts are summed in groups of ``GROUP`` samples: a rank is found in its group's
    running total, then inside the group. That keeps the work per resample to one pass
    over the draws (the gather into sorted order) rather than a running sum of them all.
    """

    __slots__ = ("before", "drawn", "groups", "ordered", "total")

    GROUP = 64

    def __init__(self, values: FloatArray, order: npt.NDArray[np.intp], counts: Counts) -> None:
        self.ordered = values[order]
        n, rows = counts.shape[0] - 1, counts.shape[1]
        width = -(-order.size // self.GROUP)
        padded = np.full(width * self.GROUP, n, dtype=np.intp)  # row n of counts is zeros
        padded[: order.size] = order
        self.drawn = counts[padded]  # (samples, resamples): draws in ascending order
        per_group = self.drawn.reshape(width, self.GROUP, rows).sum(axis=1, dtype=np.int64)
        # Running group totals with the resamples laid end to end: ascending through all
        # of them, so one searchsorted finds a rank's group in every resample at once.
        self.groups = np.cumsum(per_group.T)
        ends = self.groups[width - 1 :: width] if width else np.zeros(rows, np.int64)
        self.before = np.concatenate([[0], ends[:-1]]).astype(np.int64)  # earlier resamples
        self.total = ends - self.before  # samples drawn per resample

    def at(self, rank: npt.NDArray[np.int64]) -> FloatArray:
        """Per resample, its sample of 0-based ``rank`` among its draws, ascending."""
        padded, rows = self.drawn.shape
        width, m = padded // self.GROUP, self.ordered.size
        flat = np.searchsorted(self.groups, rank + self.before, side="right")
        group = np.clip(flat - np.arange(rows) * width, 0, width - 1)
        below = np.where(group > 0, self.groups[np.maximum(flat - 1, 0)] - self.before, 0)
        cols = group[None, :] * self.GROUP + np.arange(self.GROUP)[:, None]
        inside = self.drawn[cols, np.arange(rows)[None, :]]  # (GROUP, resamples)
        within = np.cumsum(inside, axis=0) + below[None, :]
        offset = np.argmax(within > rank[None, :], axis=0)
        picked: FloatArray = self.ordered[np.minimum(group * self.GROUP + offset, m - 1)]
        return picked


class Statistic(Protocol):
    """A statistic of one arm's per-request samples, and of its bootstrap resamples.

    ``values`` holds one sample per request in arrival order (NaN: the request has none,
    say it did not complete). ``resampled`` gets one row of draw counts per resample and
    returns one estimate per resample (NaN where the resample holds no sample).
    ``tail`` is the share of samples the statistic rests on (0.01 for a p99: the
    sections of :func:`sectioned_diff` must each hold enough of them); ``extensive``
    statistics grow with the number of requests (a total), so a section's value is
    scaled up to the whole run.
    """

    tail: float
    extensive: bool

    def __call__(self, values: FloatArray) -> float | None: ...

    def resampled(self, values: FloatArray, draws: Draws) -> FloatArray: ...


class Quantile:
    """The ``q``-th percentile (0..100), numpy's default (linear) interpolation."""

    extensive = False

    def __init__(self, q: float) -> None:
        _check_q(q)
        self.q = q
        self.tail = min(q, 100.0 - q) / 100.0

    def __call__(self, values: FloatArray) -> float | None:
        present = values[~np.isnan(values)]
        return float(np.percentile(present, self.q)) if present.size else None

    def resampled(self, values: FloatArray, draws: Draws) -> FloatArray:
        ranked = draws.ranked(values)
        total = ranked.total
        out = np.full(draws.resamples, np.nan)
        ok = total > 0
        if not ok.any():
            return out
        pos = (np.maximum(total, 1) - 1) * (self.q / 100.0)
        lo = np.floor(pos)
        hi = np.minimum(lo + 1, np.maximum(total, 1) - 1)
        a, b = ranked.at(lo.astype(np.int64)), ranked.at(hi.astype(np.int64))
        t = pos - lo  # numpy's interpolation: exact at both ends, monotonic in t
        out[ok] = np.where(t < 0.5, a + (b - a) * t, b - (b - a) * (1.0 - t))[ok]
        return out

    def __repr__(self) -> str:
        return f"Quantile({self.q!r})"


class Mean:
    """The mean over requests with a sample (of 0/1 samples: a rate)."""

    tail, extensive = 1.0, False

    def __call__(self, values: FloatArray) -> float | None:
        present = values[~np.isnan(values)]
        return float(present.mean()) if present.size else None

    def resampled(self, values: FloatArray, draws: Draws) -> FloatArray:
        present = (~np.isnan(values)).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return draws.dot(values) / draws.dot(present)

    def __repr__(self) -> str:
        return "Mean()"


class Total:
    """The sum over requests (a run total: tokens, preemptions, throughput shares)."""

    tail, extensive = 1.0, True

    def __call__(self, values: FloatArray) -> float | None:
        return float(np.nansum(values))

    def resampled(self, values: FloatArray, draws: Draws) -> FloatArray:
        # Every resample draws exactly n requests, so its sum estimates the run's total.
        return draws.dot(values)

    def __repr__(self) -> str:
        return "Total()"


class Ratio:
    """``sum(numerator) / sum(denominator)`` over requests: pass samples with two columns
    (say cached and prompt tokens for a prefix hit rate)."""

    tail, extensive = 1.0, False

    def __call__(self, values: FloatArray) -> float | None:
        den = float(np.nansum(values[:, 1]))
        return float(np.nansum(values[:, 0])) / den if den else None

    def resampled(self, values: FloatArray, draws: Draws) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return draws.dot(values[:, 0]) / draws.dot(values[:, 1])

    def __repr__(self) -> str:
        return "Ratio()"


Series = tuple["Samples", "Samples", Statistic]
Samples = Sequence[float | None] | Sequence[tuple[float, float]] | FloatArray


def as_samples(values: Samples) -> FloatArray:
    """Per-request samples as a float array, None as NaN."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
