"""The paired circular block bootstrap (Politis and Romano, 1992; block 1 is the iid
bootstrap): every arm replays the identical request stream, so each resample draws the
same blocks of requests from both arms.

The bench's verdicts use paired sectioning (``schedkit.bench.stats.sectioning``); this is
the reference method their A/A coverage check compares it with
(``benchmarks/stats/interval_coverage.md``), and gives the confidence intervals of the
policy proofs in ``benchmarks/policies/``. It is a module of the benchmarks, not of the
package (issue #36): the scripts import it as ``bootstrap`` (those in
``benchmarks/policies/`` put this folder on ``sys.path``); ``tests/bench/test_stats.py``
loads it by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from schedkit.bench.stats.estimators import (
    Counts,
    Draws,
    FloatArray,
    Samples,
    Series,
    Statistic,
    as_samples,
)

#: Resamples per bootstrap: 1,000 puts 25 resamples in each 2.5% tail of a 95% interval.
DEFAULT_N_BOOT = 1000
#: Resamples drawn at once: bounds memory at ``CHUNK x requests`` draw counts.
CHUNK = 100


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
