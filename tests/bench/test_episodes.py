"""Episodes: a stretch of the run that carries a comparison's difference gets no interval,
but its span, its arm and what would measure it (``schedkit.bench.stats.episodes``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schedkit.bench.stats.episodes import EPISODE_RATIO, episode_flag, find_episode
from schedkit.bench.stats.estimators import Quantile, Total
from schedkit.bench.stats.sectioning import section_edges, sectioned_diff


def test_a_stretch_that_carries_the_difference_is_an_episode() -> None:
    a = np.full(10, 100.0)
    b = a.copy()
    b[3:6] = 1000.0  # sections 4 to 6 only
    episode = find_episode(a, b, floor=0.0)
    assert episode is not None
    assert episode["sections"] == [4, 6] and episode["of"] == 10
    assert episode["share"] == 1.0 and episode["ratio"] is None  # nothing elsewhere
    assert (episode["arm"], episode["peak"], episode["elsewhere"]) == ("b", 1000.0, 100.0)
    # Ties (any stretch holding 4-6 has nothing outside it) go to the shortest.
    assert find_episode(b, a, floor=0.0) == {**episode, "arm": "a"}


def test_noise_elsewhere_and_the_ratio_that_makes_an_episode() -> None:
    a = np.full(10, 100.0)
    noise = np.array([1.0, -1.0, 1.0, 0.0, 0.0, 0.0, -1.0, 1.0, -1.0, 1.0])
    b = a + noise
    b[3:6] += EPISODE_RATIO * 1.01  # mean |d| inside 20.2 against 1.0 outside
    episode = find_episode(a, b, floor=0.0)
    assert episode is not None and episode["sections"] == [4, 6]
    assert episode["ratio"] == pytest.approx(EPISODE_RATIO * 1.01)
    b[3:6] -= EPISODE_RATIO * 0.02  # 19.8: the rest's noise is too close
    assert find_episode(a, b, floor=0.0) is None


def test_no_episode_in_noise_more_than_half_the_run_or_under_the_floor() -> None:
    rng = np.random.default_rng(11)
    a = np.full(10, 100.0)
    for _ in range(500):  # sections as sectioning assumes them: alike and independent
        assert find_episode(a, a + rng.normal(0.0, 5.0, 10), floor=0.0) is None
    b = a.copy()
    b[:6] = 200.0  # six sections of ten: the run's difference, not an episode
    assert find_episode(a, b, floor=0.0) is None
    b[:6] = 100.0
    b[4] = 110.0  # one section, +10: +1 over the run, under a floor of 2
    assert find_episode(a, b, floor=2.0) is None
    assert find_episode(a, b, floor=1.0) is not None
    assert find_episode(a, a.copy(), floor=0.0) is None  # no difference at all
    b[0] = np.nan  # a section without a value in one arm: not tested
    assert find_episode(a, b, floor=0.0) is None


def _overloaded(n: int = 7000) -> tuple[np.ndarray, np.ndarray]:
    """Paired TTFTs: alike, but the baseline falls 20 s behind for requests 3000-3999."""
    rng = np.random.default_rng(5)
    base = rng.exponential(100.0, size=n)
    other = base * rng.uniform(0.95, 1.05, size=n)
    base[3000:4000] += 20_000.0
    return base, other


def test_sectioning_withholds_the_interval_an_episode_carries() -> None:
    a, b = _overloaded()
    plain = sectioned_diff(a, b, Quantile(90))  # no minimum effect: no episode test
    assert plain["ci"] is not None and plain["episode"] is None and plain["a"] is not None
    assert plain["ci"][0] == -plain["a"]  # the clipped interval a reader does not believe
    r = sectioned_diff(a, b, Quantile(90), min_effect=0.02)
    assert r["ci"] is None and r["rel_ci"] is None and r["sections"] == 0
    assert not r["significant"] and r["diff"] == plain["diff"]
    episode = r["episode"]
    assert episode is not None and episode["arm"] == "a"
    # The stretch is the sections holding requests 3000-3999, no more.
    first, last = episode["sections"]
    edges = section_edges(a.size, episode["of"])
    assert edges[first - 1] <= 3000 < edges[first] and edges[last - 1] <= 3999 < edges[last]
    # The same change spread over the whole run keeps its interval.
    steady = sectioned_diff(a[:3000], a[:3000] * 0.5, Quantile(90), min_effect=0.02)
    assert steady["ci"] is not None and steady["episode"] is None


def test_a_total_is_tested_at_the_whole_runs_scale() -> None:
    a = np.zeros(1000)
    b = np.zeros(1000)
    b[500:600] = 1.0  # 100 preemptions, all in one section
    r = sectioned_diff(a, b, Total(), sections=10, min_effect=0.02)
    assert r["ci"] is None and r["diff"] == 100.0
    assert r["episode"] is not None and r["episode"]["peak"] == 1000.0  # 100 x 10 sections


def test_the_flag_names_the_metrics_the_span_and_the_remedy() -> None:
    episode = {"from_s": 292.4, "to_s": 657.8, "arm": "fcfs"}
    rows: list[dict[str, Any]] = [
        {"label": "p50 TTFT", "episode": episode},
        {"label": "p90 TTFT", "episode": {**episode, "from_s": 300.0}},
        {"label": "throughput", "episode": None},
    ]
    assert episode_flag([rows[2]]) is None
    flag = episode_flag(rows, rate_scale=4.0)
    assert flag is not None and flag["kind"] == "episode"
    assert flag["metrics"] == ["p50 TTFT", "p90 TTFT"]
    assert (flag["from_s"], flag["to_s"]) == (292.4, 657.8)
    assert flag["suggested_window"] == [1169.0, 2632.0]  # 292.4 x 4 .. 657.8 x 4, whole s
    assert "requests arriving 292-658 s (simulated)" in flag["message"]
    assert "--replicates 5" in flag["message"]
    assert "--window 1169:2632 (the trace's seconds; this run replays it at 4x)" in flag["message"]
    # After a --window, the trace's seconds start at the window's start.
    shifted = episode_flag(rows, rate_scale=1.0, window_s=[1000.0, 3000.0])
    assert shifted is not None and shifted["suggested_window"] == [1292.0, 1658.0]
    assert "(the trace's seconds)" in shifted["message"]
    unknown = episode_flag(rows)  # the bench's rate scale not given
    assert unknown is not None and unknown["suggested_window"] is None
    assert "--window START:END" in unknown["message"]
