"""A/B verdicts: every headline metric compared with the baseline arm, with its interval.

Each arm after the first is compared with the first (the baseline) on the same request
stream. Every compared metric gets a 95% interval from paired sectioning
(:func:`schedkit.bench.stats.sectioning.sectioned_diff`: the run cut into up to 10 stretches of
consecutive arrivals, a Student t interval over their differences; the A/A coverage
check in ``benchmarks/stats/interval_coverage.md`` measures how often it holds the truth)
and one of four verdicts, named alike in every output (``schedkit.bench.results.TONES``):

- ``better`` / ``worse``: the interval excludes no change and the change is at least the
  minimum effect (``min_effect``, relative; for rates, in points: 0.02 = 2 pp);
- ``no meaningful difference``: the interval lies within the minimum effect, or the
  change is real but below it;
- ``inconclusive``: the interval spans both no change and changes beyond the minimum,
  or there is no interval: too few requests for five sections holding enough of the
  tail (a p99 needs about 6,000 completed requests), or one episode carries the
  difference (:mod:`schedkit.bench.stats.episodes`: then the row says the episode's
  span and arm, and a flag what would measure it).

A maximum has no interval (one request decides it), so ``ttft_max_ms`` is judged on its
observed values alone and says so. Each row's ``no_interval`` gives the reason it has
no interval in the words every output prints (:func:`no_interval`). The summary names regressions first, in the same
words: ``"B vs A: worse on p99 TTFT; better on p50 TTFT; inconclusive (leaning worse) on
p99 queue"``. A change under the minimum effect is never named a gain or a loss: it has
no ``leaning``, so the summary calls it inconclusive, or no meaningful difference.
Flags say what no interval can: requests starved past the baseline's longest wait by
more than the minimum effect, a higher rejection share, an episode that carries some of
the differences, policy faults (per arm; all in ``schedkit.bench.stats.flags`` but the
episode's), an engine that never caught up with its arrivals, a trace cut before its
busiest stretch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedkit.bench.results import BETTER, INCONCLUSIVE, NO_DIFFERENCE, WORSE, Tone
from schedkit.bench.spec import DEFAULT_MIN_EFFECT
from schedkit.bench.stats.episodes import (
    MAXIMUM,
    NO_SAMPLES,
    TOO_FEW,
    Episode,
    episode_flag,
    episode_reason,
)
from schedkit.bench.stats.estimators import FloatArray, Mean, Quantile, Ratio, Statistic, Total
from schedkit.bench.stats.flags import comparison_flags
from schedkit.bench.stats.paired import Index, paired, samples
from schedkit.bench.stats.request_table import RequestTable
from schedkit.bench.stats.sectioning import (
    MAX_SECTIONS,
    Diff,
    point_diff,
    section_edges,
    sectioned_diff,
    sections_for,
)
from schedkit.errors import SchedkitError
from schedkit.records import RunResult

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Compared:
    """One compared metric: its per-request sample, statistic and direction."""

    key: str
    label: str
    sample: str  # a key of :func:`samples`
    statistic: Statistic | None  # None: no interval (a maximum)
    higher_is_better: bool = False
    unit: str = "ms"  # "ms", "rate" (compared in points), "count", "tok/s"


def _max(values: FloatArray) -> float | None:
    present = values[~np.isnan(values)]
    return float(present.max()) if present.size else None


#: Every metric a comparison judges, in report order. ``--metrics`` picks from these keys.
METRICS: tuple[Compared, ...] = (
    Compared("ttft_p50_ms", "p50 TTFT", "ttft_ms", Quantile(50)),
    Compared("ttft_p90_ms", "p90 TTFT", "ttft_ms", Quantile(90)),
    Compared("ttft_p99_ms", "p99 TTFT", "ttft_ms", Quantile(99)),
    Compared("ttft_max_ms", "max TTFT", "ttft_ms", None),
    Compared("tpot_p50_ms", "p50 TPOT", "tpot_ms", Quantile(50)),
    Compared("tpot_p90_ms", "p90 TPOT", "tpot_ms", Quantile(90)),
    Compared("e2e_p90_ms", "p90 E2E", "e2e_ms", Quantile(90)),
    Compared("queue_p99_ms", "p99 queue", "queue_ms", Quantile(99)),
    Compared("throughput_tok_s", "throughput", "throughput", Total(), True, "tok/s"),
    Compared("slo_attainment", "SLO attainment", "met_slo", Mean(), True, "rate"),
    Compared("rejected_share", "rejected share", "rejected", Mean(), False, "rate"),
    Compared("preemptions", "preemptions", "preemptions", Total(), False, "count"),
    Compared("recomputed_tokens", "recomputed tokens", "recomputed", Total(), False, "count"),
    Compared("prefix_hit_rate", "prefix hit rate", "prefix", Ratio(), True, "rate"),
)
METRIC_KEYS = tuple(m.key for m in METRICS)
TENANT_METRIC = Compared("ttft_p90_ms", "p90 TTFT", "ttft_ms", Quantile(90))


def check_metrics(keys: Sequence[str] | None) -> tuple[str, ...]:
    """``keys`` if every one names a compared metric (all of them when None)."""
    if keys is None:
        return METRIC_KEYS
    unknown = [k for k in keys if k not in METRIC_KEYS]
    if unknown:
        raise SchedkitError(
            f"unknown verdict metric {', '.join(map(repr, unknown))}; choose from"
            f" {', '.join(METRIC_KEYS)}"
        )
    return tuple(dict.fromkeys(keys))


def check_min_effect(value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise SchedkitError(
            f"--min-effect {value!r} is outside 0 .. 1; pass a fraction such as 0.02 (2%)"
        )
    return value


# ---------------------------------------------------------------------------
# verdicts
# ---------------------------------------------------------------------------


def _relative(diff: float, base: float | None) -> float:
    """``diff`` relative to ``base``; from a zero baseline any change is infinite."""
    if base:
        return diff / base
    return 0.0 if diff == 0.0 else math.copysign(math.inf, diff)


def _effect(metric: Compared, r: Diff) -> tuple[float, list[float] | None] | None:
    """The change as the minimum effect measures it (points for rates, else relative to
    the baseline), and its interval in the same terms; None without a change to judge."""
    diff, ci = r["diff"], r["ci"]
    if diff is None:
        return None
    if metric.unit == "rate":
        return diff, ci
    if r["a"]:
        return _relative(diff, r["a"]), r["rel_ci"]
    return _relative(diff, r["a"]), [_relative(c, r["a"]) for c in ci] if ci else None


def tone(metric: Compared, r: Diff, min_effect: float) -> Tone:
    """``better`` or ``worse`` (the interval excludes no change and the change reaches
    the minimum effect), ``no meaningful difference`` (the interval lies within the minimum
    effect, or the change is real but smaller) or ``inconclusive`` (anything else, and
    every change without an interval except a maximum's, judged on its observed values)."""
    judged = _effect(metric, r)
    if judged is None:
        return INCONCLUSIVE
    effect, ci = judged
    small = abs(effect) < min_effect
    gain = effect > 0 if metric.higher_is_better else effect < 0
    direction: Tone = BETTER if gain else WORSE
    if effect == 0.0 and (ci is None or ci == [0.0, 0.0]):
        return NO_DIFFERENCE
    if metric.statistic is None:  # a maximum: the observed values decide
        return NO_DIFFERENCE if small else direction
    if r["episode"] is not None:  # one stretch decides: neither a finding nor no change
        return INCONCLUSIVE
    if ci is None:
        return NO_DIFFERENCE if small else INCONCLUSIVE
    if ci[0] > -min_effect and ci[1] < min_effect:
        return NO_DIFFERENCE
    if r["significant"]:
        return NO_DIFFERENCE if small else direction
    return INCONCLUSIVE


def leaning(metric: Compared, r: Diff, min_effect: float) -> str | None:
    """For an inconclusive row, which way its point estimate leans; None when the
    estimate is under the minimum effect (no gain or loss worth a word)."""
    judged = _effect(metric, r)
    if judged is None or judged[0] == 0.0 or abs(judged[0]) < min_effect:
        return None
    return BETTER if (judged[0] > 0) == metric.higher_is_better else WORSE


def _value(metric: Compared, value: float | None) -> str:
    if value is None:
        return "n/a"
    if metric.unit == "rate":
        return f"{value * 100:.1f}%"
    if metric.unit == "ms":
        return f"{value / 1000:,.2f} s" if abs(value) >= 10_000 else f"{value:,.1f} ms"
    return f"{value:,.1f}" if metric.unit == "tok/s" else f"{value:,.0f}"


def verdict(
    metric: Compared, r: Diff, name: str, base: str, judged: Tone, reason: str | None
) -> str:
    """One line: the values, the change with its interval (or the reason it has none,
    :func:`no_interval`), and the verdict's name."""
    a, b, diff = r["a"], r["b"], r["diff"]
    values = f"{_value(metric, b)} vs {_value(metric, a)}"
    ci, rel, rel_ci = r["ci"], r["rel"], r["rel_ci"]
    why = reason if reason is not None else "no interval"
    if diff is None:
        change, span = "", why
    elif metric.unit == "rate":
        change = f", {_signed(diff * 100)} pp"
        span = f"95% CI {_signed(ci[0] * 100)} .. {_signed(ci[1] * 100)} pp" if ci else why
    elif rel is not None:
        change = f", {_signed(rel * 100)}%"
        span = (
            f"95% CI {_signed(rel_ci[0] * 100)}% .. {_signed(rel_ci[1] * 100)}%" if rel_ci else why
        )
    else:  # from a zero baseline: the change and its interval in the metric's unit
        change = f", {_signed(diff)}"
        span = f"95% CI {_signed(ci[0])} .. {_signed(ci[1])}" if ci else why
    return f"{metric.label}: {name} {values}{change} ({span}): {judged}"


def _signed(value: float) -> str:
    """``+1,234.5``/``-1.2``, as the reports write a change; one that rounds to zero is
    ``+0.0``."""
    text = f"{value:+,.1f}"
    return "+0.0" if text == "-0.0" else text


def no_interval(metric: Compared, r: Diff) -> str | None:
    """Why the row has no interval, in the words every output prints (results.json's
    ``no_interval``, the verdict line, the reports' interval column); None when it has
    one. The words are :mod:`schedkit.bench.stats.episodes`'."""
    if metric.statistic is None:
        return MAXIMUM
    if r["ci"] is not None:
        return None
    if r["diff"] is None:
        return NO_SAMPLES
    episode = r["episode"]
    if episode is not None:
        peak, elsewhere = _value(metric, episode["peak"]), _value(metric, episode["elsewhere"])
        return episode_reason(episode, metric.label, peak, elsewhere)
    return TOO_FEW


def summary_line(name: str, base: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """``"B vs A: worse on X; better on Y; inconclusive (leaning worse) on Z; inconclusive
    on W"``: each metric under its verdict's name, regressions first, never only "better"
    while something got worse. An inconclusive change says which way it leans only when
    it reaches the minimum effect (the row's ``leaning``); rows with no meaningful
    difference are left out."""
    groups: list[tuple[str, Tone, str | None]] = [
        (WORSE, WORSE, None),
        (BETTER, BETTER, None),
        (f"{INCONCLUSIVE} (leaning {WORSE})", INCONCLUSIVE, WORSE),
        (f"{INCONCLUSIVE} (leaning {BETTER})", INCONCLUSIVE, BETTER),
        (INCONCLUSIVE, INCONCLUSIVE, None),
    ]
    parts = []
    for words, judged, lean in groups:
        found = [
            str(row["label"])
            for row in rows
            if row["tone"] == judged and (judged != INCONCLUSIVE or row.get("leaning") == lean)
        ]
        if found:
            parts.append(f"{words} on " + ", ".join(found))
    if not parts:
        parts.append(f"{NO_DIFFERENCE} on any compared metric")
    return f"{name} vs {base}: " + "; ".join(parts)


# ---------------------------------------------------------------------------
# comparing arms
# ---------------------------------------------------------------------------


def compare_pair(
    base: RunResult,
    other: RunResult,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    min_effect: float = DEFAULT_MIN_EFFECT,
    metrics: Sequence[str] | None = None,
    rate_scale: float | None = None,
    window_s: Sequence[float] | None = None,
    tables: tuple[RequestTable, RequestTable] | None = None,
) -> dict[str, Any]:
    """``other`` against the baseline ``base``: rows, summary, flags and the method.
    ``rate_scale`` and ``window_s`` (the bench's) turn an episode's simulated seconds into
    the ``--window`` that replays it. ``tables``: both arms', when built already."""
    keys = check_metrics(metrics)
    ta, tb = tables if tables is not None else (RequestTable.of(base), RequestTable.of(other))
    sa = samples(base, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, table=ta)
    sb = samples(other, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, table=tb)
    ia, ib = paired(base, other)
    pa = {k: v[ia] for k, v in sa.items()}
    pb = {k: v[ib] for k, v in sb.items()}
    judged = [m for m in METRICS if m.key in keys]
    if np.isnan(pa["met_slo"]).all() and np.isnan(pb["met_slo"]).all():
        judged = [m for m in judged if m.sample != "met_slo"]
    if TENANT_METRIC.key in keys:
        judged += _tenant_metrics(base, ia, pa, pb)
    arrivals = ta.arrival_s[ia]
    rows = []
    blocks: dict[int, int] = {}  # each sample's dependence length, found once
    for m in judged:
        r = interval(m, pa[m.sample], pb[m.sample], min_effect, blocks)
        if r["episode"] is not None:
            _locate(r["episode"], arrivals, (base.policy, other.policy))
        rows.append(_row(m, r, other, base, min_effect))
    flags = comparison_flags(base, other, sa, sb, min_effect=min_effect)
    episodes = episode_flag(rows, rate_scale, window_s)
    return {
        "baseline": base.policy,
        "policy": other.policy,
        "n_requests": int(ia.size),
        "summary": summary_line(other.policy, base.policy, rows),
        "method": {
            "name": "paired sectioning (batch means) with a Student t interval",
            "max_sections": MAX_SECTIONS,
            "confidence": CONFIDENCE,
        },
        "min_effect": min_effect,
        "metrics": rows,
        "verdicts": [row["verdict"] for row in rows],
        "flags": flags + ([episodes] if episodes else []),
    }


def interval(
    metric: Compared,
    a: FloatArray,
    b: FloatArray,
    min_effect: float,
    blocks: dict[int, int] | None = None,
) -> Diff:
    """The metric's change between paired samples with the interval its verdict prints:
    paired sectioning, tested for an episode; a maximum's observed values alone. The
    coverage study (``benchmarks/stats/interval_coverage.py``) checks what this gives.
    ``blocks``: the samples' dependence lengths found so far (``sections_for``)."""
    if metric.statistic is None:
        return _point_only(a, b)
    return sectioned_diff(
        a,
        b,
        metric.statistic,
        confidence=CONFIDENCE,
        sections=sections_for(a, b, metric.statistic, blocks),
        min_effect=min_effect,
        in_points=metric.unit == "rate",
    )


def _locate(episode: Episode, arrival_s: FloatArray, names: tuple[str, str]) -> None:
    """Fill in the episode's arrivals (simulated seconds) and its arm's name."""
    edges = section_edges(arrival_s.size, episode["of"])
    first, last = episode["sections"]
    episode["from_s"] = float(arrival_s[edges[first - 1]])
    episode["to_s"] = float(arrival_s[edges[last] - 1])
    episode["arm"] = names[0] if episode["arm"] == "a" else names[1]


def _tenant_metrics(
    base: RunResult, order: Index, pa: dict[str, FloatArray], pb: dict[str, FloatArray]
) -> list[Compared]:
    """Each tenant's p90 TTFT when there is more than one tenant: its samples are added to
    ``pa`` and ``pb`` (paired in ``order``) as ``tenant:<name>``, NaN for other tenants'
    requests."""
    tenants = sorted({r.tenant for r in base.records})
    if len(tenants) < 2:
        return []
    tenant_of = np.array([base.records[i].tenant for i in order])
    compared = []
    for t in tenants:
        mask = tenant_of == t
        name = f"tenant:{t}"
        pa[name] = np.where(mask, pa["ttft_ms"], np.nan)
        pb[name] = np.where(mask, pb["ttft_ms"], np.nan)
        key, label = f"{name}:{TENANT_METRIC.key}", f"p90 TTFT of tenant {t}"
        compared.append(Compared(key, label, name, TENANT_METRIC.statistic))
    return compared


def _row(
    m: Compared, r: Diff, other: RunResult, base: RunResult, min_effect: float
) -> dict[str, Any]:
    """One compared metric's row: its values and interval (or why none), tone and verdict."""
    judged_tone = tone(m, r, min_effect)
    reason = no_interval(m, r)
    return {
        "metric": m.key,
        "label": m.label,
        "unit": m.unit,
        "higher_is_better": m.higher_is_better,
        **r,
        "better": {BETTER: True, WORSE: False}.get(judged_tone),
        "tone": judged_tone,
        "leaning": leaning(m, r, min_effect) if judged_tone == INCONCLUSIVE else None,
        "no_interval": reason,
        "verdict": verdict(m, r, other.policy, base.policy, judged_tone, reason),
    }


def _point_only(a: FloatArray, b: FloatArray) -> Diff:
    """A maximum's change: its observed values alone."""
    return point_diff(_max(a), _max(b))


def compare_arms(
    runs: Sequence[RunResult],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    min_effect: float = DEFAULT_MIN_EFFECT,
    metrics: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
    seed: int | None = None,
    n_boot: int | None = None,
    rate_scale: float | None = None,
    window_s: Sequence[float] | None = None,
    tables: Sequence[RequestTable] | None = None,
) -> list[dict[str, Any]]:
    """Every arm after the first against the first (see :func:`compare_pair`); ``tables``:
    the arms' :class:`RequestTable`, when built already.

    ``seed`` and ``n_boot`` set the bootstrap the verdicts used before paired sectioning;
    they are ignored, with a ``DeprecationWarning``.
    """
    if seed is not None or n_boot is not None:
        warnings.warn(
            "compare_arms ignores seed and n_boot (the verdicts' intervals come from paired"
            " sectioning, not a bootstrap); drop them (they go in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
    out = []
    for i, run in enumerate(runs[1:], start=1):
        pair = (tables[0], tables[i]) if tables is not None else None
        out.append(
            compare_pair(
                runs[0],
                run,
                slo_ttft_ms=slo_ttft_ms,
                slo_tpot_ms=slo_tpot_ms,
                min_effect=min_effect,
                metrics=metrics,
                rate_scale=rate_scale,
                window_s=window_s,
                tables=pair,
            )
        )
        if progress:
            progress(i)
    return out
