"""The intervals under the verdicts: sectioning (what the bench prints), and the block
bootstrap it is calibrated against (exact resampled statistics, block draws, block length).
The bootstrap is a module of the benchmarks (``benchmarks/stats/bootstrap.py``), loaded here
by its path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit.bench.stats.estimators import Draws, Mean, Quantile, Ratio, Total
from schedkit.bench.stats.sectioning import (
    MAX_SECTIONS,
    MIN_TAIL,
    block_length,
    sectioned_diff,
    sections_for,
)

_BOOTSTRAP = Path(__file__).resolve().parents[2] / "benchmarks" / "stats" / "bootstrap.py"
_spec = importlib.util.spec_from_file_location("benchmarks_stats_bootstrap", _BOOTSTRAP)
assert _spec is not None and _spec.loader is not None
bootstrap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bootstrap)
paired_bootstrap = bootstrap.paired_bootstrap
paired_bootstrap_diff = bootstrap.paired_bootstrap_diff
resample_counts = bootstrap.resample_counts


def _expanded(values: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """Resample ``k`` written out: each request repeated as often as it was drawn."""
    drawn = np.repeat(values, counts[:-1, k], axis=0)
    return drawn[~np.isnan(drawn)] if drawn.ndim == 1 else drawn


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(0, 1e4)), min_size=1, max_size=300),
    st.floats(0, 100),
    st.integers(1, 40),
    st.integers(0, 5),
)
def test_resampled_quantile_and_mean_equal_numpy_on_the_written_out_resample(
    raw: list[float | None], q: float, block: int, seed: int
) -> None:
    values = np.array([np.nan if v is None else v for v in raw])
    counts = resample_counts(len(raw), block, 12, np.random.default_rng(seed))
    draws = Draws(counts, {})
    quantiles, means = Quantile(q).resampled(values, draws), Mean().resampled(values, draws)
    for k in range(12):
        drawn = _expanded(values, counts, k)
        if drawn.size:
            assert quantiles[k] == pytest.approx(np.percentile(drawn, q), abs=1e-9)
            assert means[k] == pytest.approx(drawn.mean())
        else:
            assert np.isnan(quantiles[k]) and np.isnan(means[k])


def test_totals_and_ratios_of_resamples() -> None:
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50, size=90).astype(float)
    pairs = np.column_stack([tokens, tokens + rng.integers(1, 9, size=90)])
    counts = resample_counts(90, 7, 5, rng)
    draws = Draws(counts, {})
    totals, ratios = Total().resampled(tokens, draws), Ratio().resampled(pairs, draws)
    for k in range(5):
        drawn = _expanded(pairs, counts, k)
        assert totals[k] == pytest.approx(_expanded(tokens, counts, k).sum())
        assert ratios[k] == pytest.approx(drawn[:, 0].sum() / drawn[:, 1].sum())


@pytest.mark.parametrize(("n", "block"), [(1, 1), (10, 1), (10, 3), (100, 7), (100, 100)])
def test_block_draws_take_whole_runs_of_consecutive_requests(n: int, block: int) -> None:
    counts = resample_counts(n, block, 200, np.random.default_rng(0))
    assert counts.shape == (n + 1, 200) and not counts[-1].any()
    assert (counts[:-1].sum(axis=0) == n).all()  # every resample draws n requests
    # Each resample is at most ceil(n / block) runs of consecutive (circular) requests.
    starts = ((counts[:-1] > 0) & (np.roll(counts[:-1], 1, axis=0) == 0)).sum(axis=0)
    assert (starts <= -(-n // block)).all()
    if block == 1 and n == 100:  # iid: some request drawn twice, some never
        assert (counts[:-1] == 0).any() and (counts[:-1] >= 2).any()


def test_block_length_grows_with_dependence_and_stays_one_without() -> None:
    rng = np.random.default_rng(1)
    noise = rng.normal(size=5000)
    ar = np.empty(5000)
    ar[0] = 0.0
    for i in range(1, 5000):
        ar[i] = 0.95 * ar[i - 1] + noise[i]
    independent, dependent = block_length(noise), block_length(ar)
    assert independent <= 3
    assert dependent > 20 * independent
    assert dependent <= 5000 // 3
    assert block_length([1.0, 2.0]) == 1  # too short to estimate


def _ar(n: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    noise = rng.exponential(1.0, size=n)
    out = np.empty(n)
    out[0] = noise[0]
    for i in range(1, n):
        out[i] = phi * out[i - 1] + noise[i]
    return out


def test_blocks_widen_the_interval_of_dependent_latencies() -> None:
    rng = np.random.default_rng(2)
    a, b = _ar(4000, 0.98, rng), _ar(4000, 0.98, rng)  # two independent queues: A/A
    iid = paired_bootstrap_diff(a, b, Quantile(90), n_boot=300, block=1)
    blocks = paired_bootstrap_diff(a, b, Quantile(90), n_boot=300, block=block_length(a))
    assert iid["ci"] is not None and blocks["ci"] is not None
    width = blocks["ci"][1] - blocks["ci"][0]
    assert width > 2.5 * (iid["ci"][1] - iid["ci"][0])


def test_identical_arms_give_a_zero_interval_and_a_shift_is_significant() -> None:
    rng = np.random.default_rng(4)
    a = rng.exponential(100, size=400)
    same = paired_bootstrap_diff(a, a.copy(), Quantile(90), n_boot=200, block=5)
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0] and not same["significant"]
    b = a * 0.5 + rng.uniform(0, 5, size=400)
    r = paired_bootstrap_diff(a, b, Quantile(50), n_boot=200, seed=3, block=5)
    assert r["significant"] and r["ci"] is not None and r["rel"] is not None
    assert r["diff"] is not None and r["ci"][0] <= r["diff"] <= r["ci"][1] < 0
    assert r == paired_bootstrap_diff(a, b, Quantile(50), n_boot=200, seed=3, block=5)


def test_shared_resamples_missing_samples_and_bad_arguments() -> None:
    met_a = [1.0] * 50 + [0.0] * 50
    met_b = [1.0] * 90 + [0.0] * 10
    out = paired_bootstrap(
        {"slo": (met_a, met_b, Mean()), "same": (met_a, met_a, Mean())}, n_boot=200
    )
    assert out["slo"]["diff"] == pytest.approx(0.4) and out["slo"]["significant"]
    assert out["same"]["ci"] == [0.0, 0.0]
    gaps = paired_bootstrap_diff([None, None, 1.0], [2.0, None, None], Quantile(50), n_boot=50)
    assert gaps["a"] == 1.0 and gaps["b"] == 2.0 and gaps["n_boot"] < 50
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap({"x": ([1.0], [1.0, 2.0], Mean())})
    with pytest.raises(ValueError, match="block"):
        paired_bootstrap({"x": ([1.0], [1.0], Mean())}, block=0)


# ---------------------------------------------------------------------------
# sectioning: the bench's intervals
# ---------------------------------------------------------------------------


def test_sectioning_interval_is_the_t_interval_over_section_differences() -> None:
    rng = np.random.default_rng(7)
    a = rng.exponential(100, size=1000)
    b = a * 1.2 + rng.normal(0, 5, size=1000)
    r = sectioned_diff(a, b, Mean(), sections=10)
    parts = np.array([b[i : i + 100].mean() - a[i : i + 100].mean() for i in range(0, 1000, 100)])
    half = 2.262157162798205 * parts.std(ddof=1) / np.sqrt(10)  # t(0.975, 9)
    assert r["diff"] == pytest.approx(b.mean() - a.mean())
    assert r["ci"] == pytest.approx([r["diff"] - half, r["diff"] + half])
    assert r["sections"] == 10 and r["significant"]
    rel, rel_ci = r["rel"], r["rel_ci"]
    assert rel is not None and rel_ci is not None and rel_ci[0] < rel < rel_ci[1]


def test_sectioning_scales_totals_to_the_whole_run() -> None:
    a = np.ones(1000)
    b = np.concatenate([np.ones(500), np.full(500, 3.0)])
    r = sectioned_diff(a, b, Total(), sections=10)
    assert r["diff"] == 1000.0  # 500 requests x 2 more
    lo, hi = r["ci"] or [0.0, 0.0]
    assert lo < 1000.0 < hi  # the sections' differences (0 or 2000 each) straddle it


def test_sections_follow_the_tail_and_the_dependence() -> None:
    rng = np.random.default_rng(0)
    iid = rng.exponential(1.0, size=8000)
    assert sections_for(iid, iid[::-1].copy(), Quantile(50)) == MAX_SECTIONS
    # A p99 needs MIN_TAIL samples beyond it in each of at least MIN_SECTIONS sections.
    assert 5 <= sections_for(iid, iid.copy(), Quantile(99)) == 8000 // 100 // MIN_TAIL
    assert sections_for(iid[:2000], iid[:2000].copy(), Quantile(99)) == 0
    # Strong dependence: sections must be long, so fewer of them (or none).
    walk = np.cumsum(rng.normal(size=8000))
    assert sections_for(walk, walk.copy(), Quantile(50)) < MAX_SECTIONS


def test_sectioning_without_an_interval_and_bad_input() -> None:
    values = np.random.default_rng(1).exponential(1.0, size=300)
    same = sectioned_diff(values, values.copy(), Quantile(50))
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0] and not same["significant"]
    few = sectioned_diff([1.0, 2.0], [3.0, 4.0], Quantile(50))
    assert few["diff"] == 2.0 and few["ci"] is None and few["sections"] == 0
    empty = sectioned_diff([None, None], [1.0, None], Mean())
    assert empty["a"] is None and empty["diff"] is None and empty["ci"] is None
    with pytest.raises(ValueError, match="differ in length"):
        sectioned_diff([1.0], [1.0, 2.0], Mean())
