"""Order statistics, fairness and paired bootstrap confidence intervals, in pure Python.

Percentiles follow numpy's default (``method="linear"``). Weighted percentiles treat each
weight as a repeat count, so ``weighted_percentile([(x, 3)], q)`` equals
``percentile([x, x, x], q)``. The bootstrap resamples request indices with replacement and
applies the same indices to both arms, because every arm replays the identical request
stream; that pairing removes the request-mix noise shared by the arms.
"""

from __future__ import annotations

import math
import operator
import random
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, repeat
from typing import Protocol, TypedDict, runtime_checkable

#: Resamples per bootstrap. Each resample sorts every arm's drawn ranks in pure Python
#: (about 3 ms per arm at 20,000 requests), so 500 keeps a comparison to a few seconds
#: while its 2.5% tails still rest on a dozen resamples each. Pass ``n_boot`` for more.
DEFAULT_N_BOOT = 500

Statistic = Callable[[list[float]], float]


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


# ---------------------------------------------------------------------------
# percentiles and summaries
# ---------------------------------------------------------------------------


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's form: exact at both ends and monotonic in t.
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q!r} is outside 0..100; pass a percentage")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ascending ``sorted_values``, like ``np.percentile``."""
    _check_q(q)
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values; pass at least one value")
    pos = (n - 1) * (q / 100.0)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return _lerp(sorted_values[lo], sorted_values[hi], pos - lo)


def _counted_percentile(sorted_values: Sequence[float], cum: Sequence[float], q: float) -> float:
    """Percentile of the multiset where ``sorted_values[i]`` occurs ``cum[i] - cum[i-1]`` times."""
    last = len(sorted_values) - 1
    pos = (cum[-1] - 1) * (q / 100.0)
    lo = math.floor(pos)
    hi_rank = min(lo + 1, math.ceil(cum[-1] - 1))
    a = sorted_values[min(bisect_right(cum, lo), last)]
    b = sorted_values[min(bisect_right(cum, hi_rank), last)]
    return _lerp(a, b, pos - lo)


def weighted_percentile(pairs: Iterable[tuple[float, float]], q: float) -> float:
    """The ``q``-th percentile of ``(value, weight)`` pairs, each weight a repeat count."""
    _check_q(q)
    kept = sorted((v, w) for v, w in pairs if w > 0)
    if not kept:
        raise ValueError("weighted percentile of no positive weights; pass at least one")
    values = [v for v, _ in kept]
    return _counted_percentile(values, list(accumulate(w for _, w in kept)), q)


def summary(values: Iterable[float]) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of ``values``; every entry is None when empty."""
    ordered = sorted(values)
    if not ordered:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {
        "mean": math.fsum(ordered) / len(ordered),
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
    }


def weighted_summary(pairs: Iterable[tuple[float, float]]) -> dict[str, float | None]:
    """:func:`summary` for ``(value, weight)`` pairs: weighted mean and percentiles."""
    kept = sorted((v, w) for v, w in pairs if w > 0)
    if not kept:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    values = [v for v, _ in kept]
    cum = list(accumulate(w for _, w in kept))
    return {
        "mean": math.fsum(v * w for v, w in kept) / cum[-1],
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
    squares = math.fsum(x * x for x in values)
    if squares == 0.0:
        return 1.0
    return math.fsum(values) ** 2 / (len(values) * squares)


# ---------------------------------------------------------------------------
# statistics with a fast resample path
# ---------------------------------------------------------------------------


class Resample:
    """One arm's part of a bootstrap resample, viewed lazily so statistics share the work.

    Built by the bootstrap for each resample; a statistic reads only what it needs.
    """

    __slots__ = ("_arm", "_count", "_idx", "_ranks", "_total")

    def __init__(self, arm: _Arm, idx: list[int]) -> None:
        self._arm = arm
        self._idx = idx
        self._ranks: list[int] | None = None
        self._count: int | None = None if arm.has_missing else len(idx)
        self._total: float | None = None

    @property
    def sorted_values(self) -> list[float]:
        """The arm's values (one per request that has one), ascending."""
        return self._arm.sorted_values

    @property
    def count(self) -> int:
        """How many drawn requests have a value in this arm (repeats counted)."""
        if self._count is None:
            if self._ranks is not None:  # missing values sort last: a binary search suffices
                self._count = bisect_left(self._ranks, len(self._arm.sorted_values))
            else:
                self._count = sum(map(self._arm.present.__getitem__, self._idx))
        return self._count

    @property
    def sorted_ranks(self) -> list[int]:
        """Indices into ``sorted_values`` of the drawn values, ascending; the first
        ``count`` entries are meaningful (requests without a value sort last)."""
        if self._ranks is None:
            # Sorting small ints beats sorting floats and needs no per-arm value copy.
            self._ranks = sorted(map(self._arm.rank.__getitem__, self._idx))
        return self._ranks

    def values(self) -> list[float]:
        """The drawn values, ascending (built on demand: the slow, general path)."""
        values = self._arm.values
        return sorted(v for i in self._idx if (v := values[i]) is not None)

    @property
    def total(self) -> float:
        """Sum of the drawn values."""
        if self._total is None:
            self._total = sum(map(self._arm.filled.__getitem__, self._idx))
        return self._total


@runtime_checkable
class ResampledStatistic(Protocol):
    """A statistic that can also be computed from a :class:`Resample` view.

    The bootstrap calls ``from_resample`` instead of building each resample's value list;
    it returns None when the resample holds no value of this arm.
    """

    def __call__(self, values: list[float]) -> float: ...

    def from_resample(self, sample: Resample) -> float | None: ...


class Quantile:
    """The ``q``-th percentile (0..100) as a bootstrap statistic."""

    def __init__(self, q: float) -> None:
        _check_q(q)
        self.q = q

    def __call__(self, values: list[float]) -> float:
        return percentile(sorted(values), self.q)

    def from_resample(self, sample: Resample) -> float | None:
        values, ranks, count = sample.sorted_values, sample.sorted_ranks, sample.count
        if not count:
            return None
        pos = (count - 1) * (self.q / 100.0)
        lo = math.floor(pos)
        hi = min(lo + 1, count - 1)
        return _lerp(values[ranks[lo]], values[ranks[hi]], pos - lo)

    def __repr__(self) -> str:
        return f"Quantile({self.q!r})"


class Mean:
    """The arithmetic mean as a bootstrap statistic (of 0/1 samples: a rate)."""

    def __call__(self, values: list[float]) -> float:
        return math.fsum(values) / len(values)

    def from_resample(self, sample: Resample) -> float | None:
        return sample.total / sample.count if sample.count else None

    def __repr__(self) -> str:
        return "Mean()"


# ---------------------------------------------------------------------------
# paired bootstrap
# ---------------------------------------------------------------------------


class _Arm:
    """One arm's samples, indexed by request, precomputed for fast resampling."""

    def __init__(self, values: Sequence[float | None]) -> None:
        self.values = values
        present = sorted((v, i) for i, v in enumerate(values) if v is not None)
        self.sorted_values = [float(v) for v, _ in present]
        self.has_missing = len(present) < len(values)
        self.rank = [len(present)] * len(values)  # missing values rank after every value
        for r, (_, i) in enumerate(present):
            self.rank[i] = r
        self.present = [0 if v is None else 1 for v in values]
        self.filled = [0.0 if v is None else float(v) for v in values]


def _evaluate(statistic: Statistic, sample: Resample) -> float | None:
    if isinstance(statistic, ResampledStatistic):
        return statistic.from_resample(sample)
    drawn = sample.values()
    return statistic(drawn) if drawn else None


def _draw_indices(rng: random.Random, n: int) -> list[int]:
    # randbytes + modulo is ~2x faster than rng.choices; the modulo bias (< n / 2**32) is
    # far below bootstrap noise. Byte order is fixed so a seed gives the same draws anywhere.
    words = array("I")
    if words.itemsize != 4:  # pragma: no cover - exotic platforms
        return [rng.randrange(n) for _ in range(n)]
    words.frombytes(rng.randbytes(4 * n))
    if sys.byteorder == "big":  # pragma: no cover
        words.byteswap()
    return list(map(operator.mod, words, repeat(n)))


def _interval(samples: list[float], confidence: float) -> list[float] | None:
    if not samples:
        return None
    samples.sort()
    tail = (1.0 - confidence) / 2.0 * 100.0
    return [percentile(samples, tail), percentile(samples, 100.0 - tail)]


def paired_bootstrap(
    series: Mapping[str, tuple[Sequence[float | None], Sequence[float | None], Statistic]],
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, BootstrapDiff]:
    """Bootstrap several ``name -> (a, b, statistic)`` comparisons on shared resamples.

    ``a[i]`` and ``b[i]`` are the same request in the two arms; ``None`` marks a request
    without a sample in that arm and is skipped there. Every series must have the same
    length. Deterministic for a given ``seed``.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be at least 1")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")
    lengths = {len(x) for a, b, _ in series.values() for x in (a, b)}
    if len(lengths) > 1:
        raise ValueError(f"paired samples differ in length {sorted(lengths)}; align by request")
    n = lengths.pop() if lengths else 0
    pool: dict[int, _Arm] = {}  # one _Arm per sample list: shared series share work

    def arm(values: Sequence[float | None]) -> int:
        if id(values) not in pool:
            pool[id(values)] = _Arm(values)
        return id(values)

    plan = {name: (arm(a), arm(b), stat) for name, (a, b, stat) in series.items()}
    diffs: dict[str, list[float]] = {name: [] for name in plan}
    rels: dict[str, list[float]] = {name: [] for name in plan}
    rng = random.Random(seed)
    for _ in range(n_boot if n else 0):
        idx = _draw_indices(rng, n)
        views = {key: Resample(each, idx) for key, each in pool.items()}
        for name, (key_a, key_b, stat) in plan.items():
            ta = _evaluate(stat, views[key_a])
            tb = _evaluate(stat, views[key_b])
            if ta is None or tb is None:
                continue
            diffs[name].append(tb - ta)
            if ta != 0.0:
                rels[name].append((tb - ta) / ta)
    out: dict[str, BootstrapDiff] = {}
    for name, (key_a, key_b, stat) in plan.items():
        values_a, values_b = pool[key_a].sorted_values, pool[key_b].sorted_values
        sa = stat(list(values_a)) if values_a else None
        sb = stat(list(values_b)) if values_b else None
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
            "n_boot": len(diffs[name]),
        }
    return out


def paired_bootstrap_diff(
    a: Sequence[float | None],
    b: Sequence[float | None],
    statistic: Statistic,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapDiff:
    """Bootstrap ``statistic(b) - statistic(a)`` over paired requests.

    ``statistic`` receives one arm's resampled values in ascending order. Pass
    :class:`Quantile` or :class:`Mean` for the fast counted path; any other callable is
    applied to each resample directly (correct, but it sorts every resample).
    """
    return paired_bootstrap(
        {"stat": (a, b, statistic)}, n_boot=n_boot, seed=seed, confidence=confidence
    )["stat"]
