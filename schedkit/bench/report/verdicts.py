"""What a bench's comparisons say, ready to show first: flags, then verdicts, worse first.

Reads :class:`~schedkit.bench.results.Comparison` as the bench writes it (``summary``,
``method``, ``min_effect``, ``flags``, and per metric ``a``, ``b``, ``diff``, ``rel``,
``ci``, ``rel_ci``, ``unit``, ``tone``, ``verdict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schedkit.bench.report.tables import NA, fmt
from schedkit.bench.results import NO_DIFFERENCE, TONES, Comparison, MetricRow, Results, Tone
from schedkit.bench.results import Flag as ResultFlag

__all__ = [
    "ALERT_KINDS",
    "TONES",
    "ComparisonSummary",
    "Flag",
    "Verdict",
    "comparison_summaries",
    "run_flags",
    "summarize",
]
#: Flag kinds shown red; every other flag and warning is amber.
ALERT_KINDS = frozenset({"starvation", "policy_errors", "overload"})


@dataclass(frozen=True)
class Flag:
    """Something the reader must see before the numbers; ``level`` is alert or warn."""

    kind: str
    message: str

    @property
    def level(self) -> str:
        return "alert" if self.kind in ALERT_KINDS else "warn"


@dataclass(frozen=True)
class Verdict:
    """One compared metric, formatted: baseline value ``a``, policy value ``b``."""

    tone: Tone
    label: str
    a: str
    b: str
    change: str
    ci: str
    text: str


@dataclass(frozen=True)
class ComparisonSummary:
    """One policy against the baseline: headline, flags, verdicts (worse first), method."""

    baseline: str
    policy: str
    n_requests: int
    headline: str
    flags: list[Flag]
    verdicts: list[Verdict]
    method: str
    confidence: float

    @property
    def title(self) -> str:
        return f"{self.policy} vs {self.baseline}"


def _flags(flags: Sequence[ResultFlag]) -> list[Flag]:
    return [Flag(flag.kind, flag.message) for flag in flags]


def run_flags(results: Results) -> list[Flag]:
    """Run-level flags (overload, truncated, ...), then the capability-matrix warnings."""
    return _flags(results.flags) + [Flag("warning", warning) for warning in results.warnings]


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return NA
    if unit == "rate":
        return f"{value * 100:.1f}%"
    if unit == "ms":
        return f"{value / 1000:,.2f} s" if abs(value) >= 10_000 else f"{fmt(value, 'ms')} ms"
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _interval(values: Sequence[float] | None, scale: float, unit: str, why: str | None) -> str:
    """The interval, or the row's reason for none (results.json's ``no_interval``, which
    the verdict line says too; files written before it say only "no interval")."""
    if values is None or len(values) != 2:
        return why or "no interval"
    lo, hi = (v * scale for v in values)
    return f"{_signed(lo)}{unit} .. {_signed(hi)}{unit}"


def _signed(value: float) -> str:
    """``+1.2``/``-1.2`` with one decimal; a change that rounds to zero is ``+0.0``."""
    text = f"{value:+,.1f}"
    return "+0.0" if text == "-0.0" else text


def _change(row: MetricRow) -> tuple[str, str]:
    """``(change, interval)``: percentage points for rates, else relative, else absolute."""
    why = row.no_interval
    if row.unit == "rate" and row.diff is not None:
        return f"{_signed(row.diff * 100)} pp", _interval(row.ci, 100.0, " pp", why)
    if row.rel is not None:
        return f"{_signed(row.rel * 100)}%", _interval(row.rel_ci, 100.0, "%", why)
    if row.diff is not None:
        return _signed(row.diff), _interval(row.ci, 1.0, "", why)
    return NA, why or NA


def _verdict(row: MetricRow) -> Verdict:
    change, ci = _change(row)
    a, b = _value(row.a, row.unit), _value(row.b, row.unit)
    return Verdict(row.tone, row.label or row.metric, a, b, change, ci, row.verdict)


def _method(comparison: Comparison) -> str:
    method = comparison.method
    parts = [method.name]
    if method.max_sections:
        parts.append(f"up to {method.max_sections} sections of consecutive arrivals")
    parts.append(f"{method.confidence * 100:g}% confidence intervals")
    text = ", ".join(parts)
    if comparison.min_effect > 0:
        text += f"; changes within ±{comparison.min_effect * 100:g}% are {NO_DIFFERENCE}"
    return text


def summarize(comparison: Comparison) -> ComparisonSummary:
    """One comparison, its verdicts in :data:`TONES` order (worse, better, inconclusive,
    no meaningful difference; stable)."""
    verdicts = sorted(map(_verdict, comparison.metrics), key=lambda v: TONES.index(v.tone))
    return ComparisonSummary(
        baseline=comparison.baseline,
        policy=comparison.policy,
        n_requests=comparison.n_requests,
        headline=comparison.summary,
        flags=_flags(comparison.flags),
        verdicts=verdicts,
        method=_method(comparison),
        confidence=comparison.method.confidence,
    )


def comparison_summaries(results: Results) -> list[ComparisonSummary]:
    """Every comparison of the run, in its order (:func:`summarize`)."""
    return [summarize(comparison) for comparison in results.comparisons]
