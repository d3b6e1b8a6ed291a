"""Episodes: when one stretch of a run carries a comparison's difference, and the words for
every verdict without an interval.

Sectioning (:mod:`.sectioning`) treats its sections as alike: each a replication of the
same run. A run with one overload episode breaks that. The arms differ by seconds inside
the episode and by nothing outside it, the sections' differences are one huge group and a
handful of zeros, and a t interval over them is so wide that it is cut at -100% (the
demo's "p50 TTFT -37.4% (95% CI -100.0% .. +4,423.2%)"). No interval from one run can
say whether another episode would go the same way, so none is printed: the verdict says
which stretch carries the difference and what would measure it.

The test (:func:`find_episode`), on the sections' paired differences ``d_1 .. d_K``: an
episode is a stretch of adjacent sections, at most half of them, whose mean ``|d|`` is at
least :data:`EPISODE_RATIO` (20) times the mean ``|d|`` of the other sections, and whose
differences add up to at least the minimum effect over the whole run (``sum |d| / K``,
relative to the baseline, in points for rates): a stretch that changes nothing worth a
word is no episode. Why 20: when the sections are what sectioning assumes (independent,
alike), some stretch reaches a ratio of 20 in at most 0.13% of runs with normal section
differences and under 1% with heavy-tailed ones (Student t, 3 degrees of freedom), K = 5
.. 10 (``benchmarks/stats/episode_test.py``, 20,000 runs a cell). In the 800 A/A pairs of
the coverage study it withheld 2 intervals of 4,800, and the coverage of those still
printed stayed within 0.03 points (``benchmarks/stats/interval_coverage.md``, The episode
test). In the demo's overload episode the ratios are 81 to 9,999, and infinite for SLO
attainment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from schedkit.bench.stats.estimators import FloatArray

__all__ = [
    "EPISODE_RATIO",
    "MAXIMUM",
    "NO_SAMPLES",
    "TOO_FEW",
    "Episode",
    "episode_flag",
    "episode_reason",
    "find_episode",
    "span",
]

EPISODE_RATIO = 20.0  # the stretch's mean |d| over the other sections' (see the docstring)
MAX_EPISODE_SHARE = 0.5  # an episode spans at most this share of the sections

# Why a compared metric has no interval: results.json's ``no_interval``, which the verdict
# line (the command's summary, the reports) and the reports' interval column print as is.
MAXIMUM = "a maximum has no interval"
TOO_FEW = "no interval: too few requests for five sections"
NO_SAMPLES = "no interval: an arm has no sample of it"


class Episode(TypedDict):
    """The stretch of a run that carries a comparison's difference (:func:`find_episode`)."""

    sections: list[int]  # [first, last], 1-based, of the sections the run was cut into
    of: int  # sections the run was cut into
    share: float  # the stretch's share of the sections' absolute differences
    ratio: float | None  # its mean |d| over the other sections'; None: they have none
    arm: str  # the arm whose statistic moved most there ("a"/"b" until named)
    peak: float  # that arm's statistic in its most moved section of the stretch
    elsewhere: float  # that arm's median over the other sections
    from_s: float | None  # arrival of the stretch's first request (simulated seconds)
    to_s: float | None  # arrival of its last request


def find_episode(a: FloatArray, b: FloatArray, floor: float) -> Episode | None:
    """The episode of a sectioned comparison, or None (the module docstring's test).

    ``a`` and ``b`` are each section's statistic in the two arms (NaN: none; a total
    already scaled up to the whole run), ``floor`` the smallest change worth a word in
    the statistic's units. Among the stretches of adjacent sections (at most half of
    them) the one with the highest ratio is tested; ties go to the shorter stretch.
    ``from_s`` and ``to_s`` are left None for the caller, who knows the arrivals.
    """
    diffs = np.abs(b - a)
    k = diffs.size
    if k < 2 or np.isnan(diffs).any():
        return None
    cum = np.concatenate([[0.0], np.cumsum(diffs)])
    total = float(cum[-1])
    if total <= 0.0:
        return None
    best: tuple[float, int, int, int] | None = None  # (ratio, -length, first, last)
    for length in range(1, int(k * MAX_EPISODE_SHARE) + 1):
        for first in range(k - length + 1):
            inside = float(cum[first + length] - cum[first])
            outside = (total - inside) / (k - length)
            ratio = inside / length / outside if outside > 0.0 else np.inf
            key = (ratio, -length, first, first + length - 1)
            if inside > 0.0 and (best is None or key[:2] > best[:2]):
                best = key
    if best is None or best[0] < EPISODE_RATIO:
        return None
    ratio, _, first, last = best
    inside = float(cum[last + 1] - cum[first])
    if inside / k < floor:
        return None
    arm, peak, elsewhere = _moved(a, b, first, last)
    return {
        "sections": [first + 1, last + 1],
        "of": k,
        "share": inside / total,
        "ratio": None if np.isinf(ratio) else float(ratio),
        "arm": arm,
        "peak": peak,
        "elsewhere": elsewhere,
        "from_s": None,
        "to_s": None,
    }


def _moved(a: FloatArray, b: FloatArray, first: int, last: int) -> tuple[str, float, float]:
    """The arm whose statistic moved most inside ``first..last`` from its median over the
    other sections, its value in its most moved section, and that median."""
    outside = np.r_[0:first, last + 1 : a.size]
    found: list[tuple[float, str, float, float]] = []
    for name, values in (("a", a), ("b", b)):
        elsewhere = float(np.median(values[outside]))
        moved = np.abs(values[first : last + 1] - elsewhere)
        i = int(np.argmax(moved))
        found.append((float(moved[i]), name, float(values[first + i]), elsewhere))
    _, arm, peak, elsewhere = max(found, key=lambda f: f[0])
    return arm, peak, elsewhere


def episode_reason(episode: Episode, label: str, peak: str, elsewhere: str) -> str:
    """A row's reason for no interval when an episode carries its difference: ``peak``
    and ``elsewhere`` are the episode's values, formatted in the metric's unit (a total's
    at the whole run's scale)."""
    share = math.floor(episode["share"] * 100)
    return (
        f"no interval: one episode carries {share}% of the difference, requests arriving"
        f" {span(episode)}, where {episode['arm']}'s {label} was {peak} against {elsewhere}"
        " elsewhere"
    )


def span(episode: Episode) -> str:
    """``"292-658 s"``: the episode's arrivals, in simulated seconds."""
    return f"{episode['from_s'] or 0.0:,.0f}-{episode['to_s'] or 0.0:,.0f} s"


def episode_flag(
    rows: Sequence[Mapping[str, Any]],
    rate_scale: float | None = None,
    window_s: Sequence[float] | None = None,
) -> dict[str, Any] | None:
    """A comparison's flag when an episode carries some of its rows' differences: the
    metrics, the span of their episodes, and what would
    measure them: ``--replicates`` (independent streams), or ``--window`` to replay the
    episode alone, in the trace's seconds when the bench's ``rate_scale`` (and
    ``window_s``) are known."""
    found = [(str(row["label"]), row["episode"]) for row in rows if row.get("episode")]
    if not found:
        return None
    start = min(float(e["from_s"]) for _, e in found)
    end = max(float(e["to_s"]) for _, e in found)
    window = _trace_window(start, end, rate_scale, window_s)
    replay = "bench the episode alone with --window START:END (the trace's seconds)"
    if window is not None:
        scaled = f"; this run replays it at {rate_scale:.3g}x" if rate_scale != 1.0 else ""
        replay = f"bench the episode alone with --window {window[0]:g}:{window[1]:g}"
        replay += f" (the trace's seconds{scaled})"
    labels = ", ".join(label for label, _ in found)
    message = (
        f"one episode, requests arriving {start:,.0f}-{end:,.0f} s (simulated), carries the"
        f" difference on {labels}: no interval is printed for these, since one run cannot"
        " say whether another episode would go the same way. To measure it, rerun with"
        " --replicates 5 (independent streams: trace windows, or seeded arrivals with"
        f" --arrivals poisson), or {replay}"
    )
    return {
        "kind": "episode",
        "message": message,
        "metrics": [label for label, _ in found],
        "from_s": start,
        "to_s": end,
        "suggested_window": list(window) if window is not None else None,
    }


def _trace_window(
    start: float, end: float, rate_scale: float | None, window_s: Sequence[float] | None
) -> tuple[float, float] | None:
    """Simulated seconds ``start .. end`` as a ``--window`` of the trace: times the rate
    scale, after the window's start; whole seconds that hold both ends."""
    if rate_scale is None:
        return None
    offset = float(window_s[0]) if window_s else 0.0
    return float(math.floor(start * rate_scale + offset)), float(
        math.floor(end * rate_scale + offset) + 1
    )
