"""Paired sectioning, the bench's intervals: the run cut into up to ``MAX_SECTIONS``
stretches of consecutive arrivals, each long enough for the data's dependence
(:func:`block_length`, Politis and White) and for the tail statistic, and a Student t
interval over the sections' paired differences. Coverage: ``benchmarks/stats/interval_coverage.md``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from schedkit.bench.stats.episodes import Episode, find_episode
from schedkit.bench.stats.estimators import FloatArray, Samples, Series, Statistic, as_samples


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
    episode: Episode | None  # the stretch that carries the difference (then no interval)


def sections_for(
    a: FloatArray, b: FloatArray, statistic: Statistic, blocks: dict[int, int] | None = None
) -> int:
    """How many sections to cut a paired series into, 0 when too few for an interval.

    At most :data:`MAX_SECTIONS`; each section must span :data:`SECTION_BLOCKS` of the
    longer of the two arms' dependence lengths (:func:`block_length` of their ranks)
    and hold :data:`MIN_TAIL` samples beyond the statistic's quantile. Fewer than
    :data:`MIN_SECTIONS` gives 0. These constants were tuned by the A/A coverage check in
    ``benchmarks/stats/interval_coverage.md``. ``blocks`` keeps each series' dependence
    length by the array's ``id`` for the next call on it (several statistics of one
    sample: p50, p90 and p99 TTFT); the caller keeps the arrays alive while it is used.
    """
    present = min(int(np.count_nonzero(~np.isnan(x))) for x in (a, b))
    if present < MIN_SECTIONS:
        return 0
    block = max(_dependence(x, blocks) for x in (a, b) if x.ndim == 1) if a.ndim == 1 else 1
    by_dependence = a.shape[0] // (SECTION_BLOCKS * block)
    by_tail = int(present * statistic.tail // MIN_TAIL)
    k = min(MAX_SECTIONS, by_dependence, by_tail)
    return k if k >= MIN_SECTIONS else 0


def _dependence(x: FloatArray, blocks: dict[int, int] | None) -> int:
    """:func:`block_length` of ``x``'s ranks, once per array when ``blocks`` is given."""
    if blocks is None:
        return block_length(ranks(x))
    if id(x) not in blocks:
        blocks[id(x)] = block_length(ranks(x))
    return blocks[id(x)]


def ranks(values: FloatArray) -> FloatArray:
    """Average ranks of the samples (NaN left out): their autocorrelations are not thrown
    by a few huge latencies."""
    present = values[~np.isnan(values)]
    distinct, inverse, counts = np.unique(present, return_inverse=True, return_counts=True)
    average = np.cumsum(counts) - (counts - 1) / 2.0  # each tie group's ranks, averaged
    return np.asarray(average[inverse], dtype=np.float64) if distinct.size else present


#: ``t_quantile(0.95, df)`` as ``scipy.special.stdtrit`` gives it, for the degrees of
#: freedom of a sectioning interval (at most ``MAX_SECTIONS - 1``) or a sweep's replicates:
#: the bench's confidence needs no scipy import (0.1 s of every command that compares).
_T_95 = {
    1: 12.706204736174694, 2: 4.302652729749462, 3: 3.1824463052837078, 4: 2.7764451051977934,
    5: 2.5705818356363146, 6: 2.4469118511449786, 7: 2.364624251592784, 8: 2.306004135204166,
    9: 2.262157162798205, 10: 2.228138851986274, 11: 2.200985160091639, 12: 2.1788128296672284,
    13: 2.1603686564627913, 14: 2.144786687917804, 15: 2.131449545559776,
    16: 2.1199052992212546, 17: 2.1098155778333156, 18: 2.1009220402410382,
    19: 2.0930240544083087, 20: 2.085963447265864, 21: 2.0796138447276795,
    22: 2.0738730679040254, 23: 2.0686576104190486, 24: 2.0638985616280245,
    25: 2.0595385527532972, 26: 2.0555294386428735, 27: 2.0518305164802846,
    28: 2.0484071417952454, 29: 2.045229642132703, 30: 2.0422724563012378,
}  # fmt: skip


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value (``scipy.special.stdtrit``)."""
    if confidence == 0.95 and df in _T_95:
        return _T_95[df]
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2.0))


def section_edges(n: int, k: int) -> npt.NDArray[np.intp]:
    """The ``k + 1`` bounds of ``k`` sections of ``n`` paired requests: section ``i`` holds
    requests ``edges[i]`` up to (not including) ``edges[i + 1]``, in arrival order."""
    return np.linspace(0, n, k + 1).astype(np.intp)


def sectioned_diff(
    a: Samples,
    b: Samples,
    statistic: Statistic,
    *,
    confidence: float = 0.95,
    sections: int | None = None,
    min_effect: float | None = None,
    in_points: bool = False,
) -> Diff:
    """``statistic(b) - statistic(a)`` with a sectioning interval (batch means).

    ``a[i]`` and ``b[i]`` are the same request in the two arms, in arrival order; NaN
    (None) marks a request without a sample. The requests are cut into ``K`` contiguous
    sections (:func:`sections_for` unless given) and the difference computed on each
    (an extensive statistic scaled up by ``K``); the interval is the whole run's
    difference plus or minus ``t(K - 1) * sd / sqrt(K)`` over the sections' differences
    (Asmussen and Glynn, *Stochastic Simulation*, 2007, III.5: sectioning), cut at
    ``-a`` (the statistics are never negative); ``rel_ci`` is that interval over ``a``.
    Sections long against the dependence between neighbouring requests behave as
    independent replications, which resampling single requests does not.

    With ``min_effect`` (relative to ``a``; in points with ``in_points``), the sections
    are also tested for an episode (:func:`schedkit.bench.stats.episodes.find_episode`):
    where one stretch carries the difference, there is no interval and ``episode`` says
    which stretch. Without it, no such test (the plain sectioning interval).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")
    xa, xb = as_samples(a), as_samples(b)
    if xa.shape != xb.shape:
        raise ValueError(
            f"paired samples differ in length {xa.shape} vs {xb.shape}; align by request"
        )
    sa, sb = statistic(xa), statistic(xb)
    out = point_diff(sa, sb)
    diff = out["diff"]
    k = sections_for(xa, xb, statistic) if sections is None else sections
    if sa is None or diff is None or k < 2:
        return out
    pa, pb = section_values(xa, xb, statistic, k)
    diffs = (pb - pa)[~np.isnan(pb - pa)]
    if diffs.size < 2:
        return out
    if min_effect is not None and diffs.size >= MIN_SECTIONS:
        floor = min_effect if in_points else min_effect * abs(sa)
        out["episode"] = find_episode(pa, pb, floor)
        if out["episode"] is not None:
            return out
    ci = _t_interval(diffs, diff, sa, confidence)
    out["ci"], out["significant"] = ci, bool(ci[0] > 0.0 or ci[1] < 0.0)
    out["sections"] = int(diffs.size)
    if sa:  # the same interval relative to the baseline, so both say the same
        out["rel_ci"] = [ci[0] / abs(sa), ci[1] / abs(sa)]
    return out


def _t_interval(diffs: FloatArray, diff: float, a: float, confidence: float) -> list[float]:
    """``diff`` plus or minus ``t(K - 1) * sd / sqrt(K)`` over the ``K`` sections'
    differences, cut at ``-a``: every statistic here is >= 0, so ``b - a >= -a`` (cutting
    the interval to where the value can lie keeps its coverage)."""
    t = t_quantile(confidence, diffs.size - 1)
    half = t * float(diffs.std(ddof=1)) / math.sqrt(diffs.size)
    return [max(diff - half, -a), diff + half]


def point_diff(a: float | None, b: float | None) -> Diff:
    """``b - a`` and its relative change, without an interval."""
    diff = b - a if a is not None and b is not None else None
    return {
        "a": a,
        "b": b,
        "diff": diff,
        "rel": diff / a if diff is not None and a else None,
        "ci": None,
        "rel_ci": None,
        "significant": False,
        "sections": 0,
        "episode": None,
    }


def section_values(
    a: FloatArray, b: FloatArray, statistic: Statistic, k: int
) -> tuple[FloatArray, FloatArray]:
    """Each of ``k`` sections' statistic in both arms (NaN: none), an extensive one scaled
    up by ``k`` to the whole run's."""
    scale = float(k) if statistic.extensive else 1.0
    values = np.full((2, k), np.nan)
    for s, (i, j) in enumerate(itertools.pairwise(section_edges(a.shape[0], k))):
        for arm, x in enumerate((a, b)):
            value = statistic(x[i:j])
            if value is not None:
                values[arm, s] = value * scale
    return values[0], values[1]


def sectioned(series: Mapping[str, Series], *, confidence: float = 0.95) -> dict[str, Diff]:
    """:func:`sectioned_diff` of several ``name -> (a, b, statistic)`` comparisons."""
    return {
        name: sectioned_diff(a, b, stat, confidence=confidence)
        for name, (a, b, stat) in series.items()
    }
