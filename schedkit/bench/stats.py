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
:func:`paired_bootstrap` (a circular block bootstrap, Politis and Romano, 1992; block 1
is the iid bootstrap) is kept as the method it was calibrated against. Their coverage:
``benchmarks/stats/calibration.md``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypedDict

import numpy as np
import numpy.typing as npt

#: Resamples per bootstrap: 1,000 puts 25 resamples in each 2.5% tail of a 95% interval.
DEFAULT_N_BOOT = 1000
#: Resamples drawn at once: bounds memory at ``CHUNK x requests`` draw counts.
CHUNK = 100


# ---------------------------------------------------------------------------
# percentiles and summaries
# ---------------------------------------------------------------------------


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q!r} is outside 0..100; pass a percentage")


def percentile(sorted_values: Sequence[float], q: float) -> float:
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
    pairs: Iterable[tuple[float, float]],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
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


def summary(values: Iterable[float]) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of ``values``; every entry is None when empty."""
    data = np.fromiter(values, dtype=np.float64)
    if not data.size:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {"mean": float(data.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def weighted_summary(pairs: Iterable[tuple[float, float]]) -> dict[str, float | None]:
    """:func:`summary` for ``(value, weight)`` pairs: weighted mean and percentiles."""
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


# ---------------------------------------------------------------------------
# block length (for both methods below)
# ---------------------------------------------------------------------------


def _autocovariance(x: FloatArray, lags: int) -> FloatArray:
    """Sample autocovariances of ``x`` at lags 0..``lags`` (biased, as Politis and White)."""
    n = x.size
    centred = x - x.mean()
    size = 1 << int(2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, size)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), size)[: lags + 1] / n
    return np.asarray(acov, dtype=np.float64)


def block_length(x: Sequence[float] | FloatArray) -> int:
    """Circular block bootstrap block length for the series ``x`` (in its order).

    The data-driven rule of Politis and White (2004) with the correction of Patton,
    Politis and White (2009), as ``arch.bootstrap.optimal_block_length`` computes it:
    the flat-top lag window's bandwidth is twice the smallest lag after which
    ``K = max(5, sqrt(log10 n))`` autocorrelations in a row are insignificant
    (``|rho| < 2 sqrt(log10 n / n)``), and ``b = (2 G^2 / D)^(1/3) n^(1/3)`` with
    ``D = 4/3 g(0)^2`` for the circular bootstrap. Clipped to ``1 .. n // 3``. Written
    here rather than taken from ``arch``, which would bring pandas and statsmodels
    into every bench for these twenty lines. NaN entries are left out.
    """
    series = np.asarray(x, dtype=np.float64)
    series = series[~np.isnan(series)]
    n = series.size
    if n < 8:
        return 1
    cap = max(1, min(int(np.ceil(3 * np.sqrt(n))), n // 3))
    k_n = max(5, int(np.sqrt(np.log10(n))))
    m_max = int(np.ceil(np.sqrt(n))) + k_n
    acov = _autocovariance(series, min(n - 1, 2 * m_max))
    if acov[0] <= 0.0:
        return 1
    rho = np.abs(acov[1:] / acov[0])
    threshold = 2.0 * np.sqrt(np.log10(n) / n)
    small = rho < threshold
    m_hat = m_max
    for m in range(min(m_max, small.size - k_n)):
        if small[m : m + k_n].all():
            m_hat = m
            break
    bandwidth = min(2 * max(m_hat, 1), acov.size - 1)
    lags = np.arange(-bandwidth, bandwidth + 1)
    t = np.abs(lags) / bandwidth
    window = np.where(t <= 0.5, 1.0, np.where(t <= 1.0, 2.0 * (1.0 - t), 0.0))
    r = acov[np.abs(lags)]
    g = float(np.sum(window * np.abs(lags) * r))
    d = 4.0 / 3.0 * float(np.sum(window * r)) ** 2
    if d <= 0.0 or g == 0.0:
        return 1
    b = (2.0 * g * g / d) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(cap, max(1, round(b))))


# ---------------------------------------------------------------------------
# paired sectioning: the bench's intervals
# ---------------------------------------------------------------------------

MIN_SECTIONS = 5  # fewer sections: no interval (t with < 4 degrees of freedom is too wide)
MAX_SECTIONS = 10
SECTION_BLOCKS = 3  # a section spans at least this many of the series' dependence blocks
MIN_TAIL = 12  # samples beyond a quantile that each section must hold


class Diff(TypedDict):
    """One statistic compared between arm ``a`` (baseline) and arm ``b``."""

    a: float | None  # statistic on arm a's samples
    b: float | None
    diff: float | None  # b - a
    rel: float | None  # (b - a) / a; None when a is 0 or missing
    ci: list[float] | None  # [lo, hi] interval of diff; None: no interval
    rel_ci: list[float] | None  # the interval of rel
    significant: bool  # ci excludes 0
    sections: int  # sections the interval rests on; 0: no interval


def sections_for(a: FloatArray, b: FloatArray, statistic: Statistic) -> int:
    """How many sections to cut a paired series into, 0 when too few for an interval.

    At most :data:`MAX_SECTIONS`; each section must span :data:`SECTION_BLOCKS` of the
    longer of the two arms' dependence lengths (:func:`block_length` of their ranks)
    and hold :data:`MIN_TAIL` samples beyond the statistic's quantile. Fewer than
    :data:`MIN_SECTIONS` gives 0. These constants come from the A/A calibration in
    ``benchmarks/stats/calibration.md``.
    """
    present = min(int(np.count_nonzero(~np.isnan(x))) for x in (a, b))
    if present < MIN_SECTIONS:
        return 0
    block = max(block_length(ranks(x)) for x in (a, b) if x.ndim == 1) if a.ndim == 1 else 1
    by_dependence = a.shape[0] // (SECTION_BLOCKS * block)
    by_tail = int(present * statistic.tail // MIN_TAIL)
    k = min(MAX_SECTIONS, by_dependence, by_tail)
    return k if k >= MIN_SECTIONS else 0


def ranks(values: FloatArray) -> FloatArray:
    """Average ranks of the samples (NaN left out): their autocorrelations are not thrown
    by a few huge latencies."""
    present = values[~np.isnan(values)]
    distinct, inverse, counts = np.unique(present, return_inverse=True, return_counts=True)
    average = np.cumsum(counts) - (counts - 1) / 2.0  # each tie group's ranks, averaged
    return np.asarray(average[inverse], dtype=np.float64) if distinct.size else present


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value (``scipy.special.stdtrit``)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2.0))


def sectioned_diff(
    a: Samples,
    b: Samples,
    statistic: Statistic,
    *,
    confidence: float = 0.95,
    sections: int | None = None,
) -> Diff:
    """``statistic(b) - statistic(a)`` with a sectioning interval (batch means).

    ``a[i]`` and ``b[i]`` are the same request in the two arms, in arrival order; NaN
    (None) marks a request without a sample. The requests are cut into ``K`` contiguous
    sections (:func:`sections_for` unless given) and the difference computed on each
    (an extensive statistic scaled up by ``K``); the interval is the whole run's
    difference plus or minus ``t(K - 1) * sd / sqrt(K)`` over the sections' differences
    (Asmussen and Glynn, *Stochastic Simulation*, 2007, III.5: sectioning), cut at
    ``-a`` (the statistics are never negative); ``rel_ci`` is that interval over ``a``.
    Sections long
    against the dependence between neighbouring requests behave as independent
    replications, which resampling single requests does not.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")
    xa, xb = as_samples(a), as_samples(b)
    if xa.shape != xb.shape:
        raise ValueError(
            f"paired samples differ in length {xa.shape} vs {xb.shape}; align by request"
        )
    sa, sb = statistic(xa), statistic(xb)
    diff = sb - sa if sa is not None and sb is not None else None
    out: Diff = {
        "a": sa,
        "b": sb,
        "diff": diff,
        "rel": diff / sa if diff is not None and sa else None,
        "ci": None,
        "rel_ci": None,
        "significant": False,
        "sections": 0,
    }
    k = sections_for(xa, xb, statistic) if sections is None else sections
    if sa is None or diff is None or k < 2:
        return out
    scale = float(k) if statistic.extensive else 1.0
    edges = np.linspace(0, xa.shape[0], k + 1).astype(np.intp)
    parts = [(statistic(xa[i:j]), statistic(xb[i:j])) for i, j in itertools.pairwise(edges)]
    diffs = np.array([(pb - pa) * scale for pa, pb in parts if pa is not None and pb is not None])
    if diffs.size < 2:
        return out
    t = t_quantile(confidence, diffs.size - 1)
    half = t * float(diffs.std(ddof=1)) / math.sqrt(diffs.size)
    # Every statistic here is >= 0, so b - a >= -a: the interval is cut there (cutting
    # it to where the value can lie keeps its coverage).
    ci = [max(diff - half, -sa), diff + half]
    out["ci"], out["significant"] = ci, bool(ci[0] > 0.0 or ci[1] < 0.0)
    out["sections"] = int(diffs.size)
    if sa:  # the same interval relative to the baseline, so both say the same
        out["rel_ci"] = [ci[0] / abs(sa), ci[1] / abs(sa)]
    return out


def sectioned(series: Mapping[str, Series], *, confidence: float = 0.95) -> dict[str, Diff]:
    """:func:`sectioned_diff` of several ``name -> (a, b, statistic)`` comparisons."""
    return {
        name: sectioned_diff(a, b, stat, confidence=confidence)
        for name, (a, b, stat) in series.items()
    }


# ---------------------------------------------------------------------------
# the paired circular block bootstrap (kept for comparison: see the calibration)
# ---------------------------------------------------------------------------


def _coverage(starts: npt.NDArray[np.int64], n: int, length: int) -> Counts:
    """Draw counts (``n`` rows, one column per resample) of blocks of ``length``
    requests at ``starts`` (one row of starts per resample), wrapping past the last
    request to the first (the circular bootstrap)."""
    rows = starts.shape[0]
    flat = (starts * rows + np.arange(rows, dtype=np.int64)[:, None]).ravel()
    hist = np.bincount(flat, minlength=n * rows).reshape(n, rows).astype(np.int32)
    # counts[j] = starts in j-length+1 .. j (circularly): a moving sum of the histogram.
    padded = np.concatenate([hist[n - length :], hist], axis=0)
    cum = np.cumsum(padded, axis=0, dtype=np.int32)
    return np.asarray(cum[length:] - cum[:n], dtype=np.int32)


def resample_counts(n: int, block: int, resamples: int, rng: np.random.Generator) -> Counts:
    """Draw counts of ``resamples`` circular block bootstrap resamples of ``n`` requests,
    shaped ``(n + 1, resamples)`` (row ``n`` is zeros): ``ceil(n / block)`` blocks of
    ``block`` consecutive requests at uniform starts, the last one cut so that every
    resample draws exactly ``n``. ``block=1`` is the iid bootstrap."""
    block = max(1, min(block, n))
    full, rest = divmod(n, block)
    starts = rng.integers(0, n, size=(resamples, full + (rest > 0)), dtype=np.int64)
    counts = np.zeros((n + 1, resamples), dtype=np.int32)
    counts[:n] = _coverage(starts[:, :full], n, block)
    if rest:
        counts[:n] += _coverage(starts[:, full:], n, rest)
    return counts


class BootstrapDiff(TypedDict):
    """One statistic compared between arm ``a`` (baseline) and arm ``b``."""

    a: float | None  # statistic on arm a's samples
    b: float | None
    diff: float | None  # b - a
    rel: float | None  # (b - a) / a; None when a is 0 or missing
    ci: list[float] | None  # [lo, hi] percentile-bootstrap interval of diff
    rel_ci: list[float] | None  # the same interval for rel
    significant: bool  # ci excludes 0
    n_boot: int  # resamples where both arms had samples


Series = tuple["Samples", "Samples", Statistic]
Samples = Sequence[float | None] | Sequence[tuple[float, float]] | FloatArray


def as_samples(values: Samples) -> FloatArray:
    """Per-request samples as a float array, None as NaN."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _interval(samples: FloatArray, confidence: float) -> list[float] | None:
    samples = samples[~np.isnan(samples)]
    if not samples.size:
        return None
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return [float(lo), float(hi)]


def paired_bootstrap(
    series: Mapping[str, Series],
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = 0.95,
    block: int = 1,
    chunk: int = CHUNK,
) -> dict[str, BootstrapDiff]:
    """Bootstrap several ``name -> (a, b, statistic)`` comparisons on shared resamples.

    ``a[i]`` and ``b[i]`` are the same request in the two arms, in arrival order; None
    (NaN) marks a request without a sample in that arm. Every resample draws the same
    blocks of ``block`` consecutive requests for both arms (the paired circular block
    bootstrap; ``block=1`` resamples requests independently). Every series must have
    the same length. Deterministic for a given ``seed``.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be at least 1")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")
    if block < 1:
        raise ValueError(f"block={block!r} must be at least 1")
    arrays: dict[int, FloatArray] = {}  # one array per sample list: shared series share it

    def array(values: Samples) -> FloatArray:
        if id(values) not in arrays:
            arrays[id(values)] = as_samples(values)
        return arrays[id(values)]

    plan = {name: (array(a), array(b), stat) for name, (a, b, stat) in series.items()}
    lengths = {len(x) for a, b, _ in plan.values() for x in (a, b)}
    if len(lengths) > 1:
        raise ValueError(f"paired samples differ in length {sorted(lengths)}; align by request")
    n = lengths.pop() if lengths else 0
    diffs = {name: np.empty(0) for name in plan}
    rels = {name: np.empty(0) for name in plan}
    rng = np.random.default_rng(seed)
    orders: dict[int, npt.NDArray[np.intp]] = {}
    done = 0
    while n and done < n_boot:
        rows = min(chunk, n_boot - done)
        draws = Draws(resample_counts(n, block, rows, rng), orders)
        estimates: dict[tuple[int, int], FloatArray] = {}
        for name, (a, b, stat) in plan.items():
            ta = estimates.setdefault((id(a), id(stat)), stat.resampled(a, draws))
            tb = estimates.setdefault((id(b), id(stat)), stat.resampled(b, draws))
            d = tb - ta
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.where(ta != 0.0, d / ta, np.nan)
            diffs[name] = np.concatenate([diffs[name], d])
            rels[name] = np.concatenate([rels[name], rel])
        done += rows
    out: dict[str, BootstrapDiff] = {}
    for name, (a, b, stat) in plan.items():
        sa, sb = stat(a), stat(b)
        diff = sb - sa if sa is not None and sb is not None else None
        ci = _interval(diffs[name], confidence)
        out[name] = {
            "a": sa,
            "b": sb,
            "diff": diff,
            "rel": diff / sa if diff is not None and sa else None,
            "ci": ci,
            "rel_ci": _interval(rels[name], confidence) if sa else None,
            "significant": ci is not None and (ci[0] > 0.0 or ci[1] < 0.0),
            "n_boot": int(np.count_nonzero(~np.isnan(diffs[name]))),
        }
    return out


def paired_bootstrap_diff(
    a: Samples,
    b: Samples,
    statistic: Statistic,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = 0.95,
    block: int = 1,
) -> BootstrapDiff:
    """Bootstrap ``statistic(b) - statistic(a)`` over paired requests (one series of
    :func:`paired_bootstrap`)."""
    return paired_bootstrap(
        {"stat": (a, b, statistic)}, n_boot=n_boot, seed=seed, confidence=confidence, block=block
    )["stat"]
