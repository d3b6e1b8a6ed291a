"""What a bench's comparisons say, ready to show first: flags, then verdicts, worse first.

Reads ``results["comparisons"]`` as the bench writes it (``summary``, ``method``,
``min_effect``, ``flags``, and per metric ``a``, ``b``, ``diff``, ``rel``, ``ci``, ``rel_ci``,
``tone``, ``verdict``), and older results without ``tone``, ``summary`` or ``flags``:
a tone then comes from ``better`` (True better, False worse, None same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schedkit.bench.report.tables import NA, fmt

#: Verdict tones in the order the summary lists them: regressions first.
TONES = ("worse", "better", "inconclusive", "same")
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

    tone: str
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
    n_requests: int | None
    headline: str
    flags: list[Flag]
    verdicts: list[Verdict]
    method: str
    confidence: float

    @property
    def title(self) -> str:
        return f"{self.policy} vs {self.baseline}"


def _flags(items: Any) -> list[Flag]:
    if not isinstance(items, Sequence) or isinstance(items, str):
        return []
    return [
        Flag(str(f.get("kind", "flag")), str(f.get("message", "")))
        if isinstance(f, Mapping)
        else Flag("warning", str(f))
        for f in items
    ]


def run_flags(results: Mapping[str, Any]) -> list[Flag]:
    """Run-level flags (overload, truncated, ...), then the capability-matrix warnings."""
    return _flags(results.get("flags")) + _flags(results.get("warnings"))


def _tone(row: Mapping[str, Any]) -> str:
    tone = row.get("tone")
    if tone in TONES:
        return str(tone)
    better = row.get("better")
    return "better" if better is True else "worse" if better is False else "same"


def _unit(row: Mapping[str, Any]) -> str:
    """``ms``, ``rate``, ``count`` or ``tok/s``: the row's ``unit``, else read off its name."""
    if row.get("unit"):
        return str(row["unit"])
    name = str(row.get("metric", ""))
    if "attainment" in name or name.endswith(("_rate", "_share")):
        return "rate"
    return "ms" if name.endswith("_ms") else "tok/s" if name.endswith("_tok_s") else ""


def _value(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, int | float):
        return NA
    unit = _unit(row)
    if unit == "rate":
        return f"{value * 100:.1f}%"
    if unit == "ms":
        return f"{value / 1000:,.2f} s" if abs(value) >= 10_000 else f"{fmt(value, 'ms')} ms"
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _interval(values: Any, scale: float, unit: str) -> str:
    if not (isinstance(values, Sequence) and len(values) == 2 and None not in values):
        return "no interval"  # a maximum, say: point values only
    lo, hi = (float(v) * scale for v in values)
    return f"{_signed(lo)}{unit} .. {_signed(hi)}{unit}"


def _signed(value: float) -> str:
    """``+1.2``/``-1.2`` with one decimal; a change that rounds to zero is ``+0.0``."""
    text = f"{value:+,.1f}"
    return "+0.0" if text == "-0.0" else text


def _change(row: Mapping[str, Any]) -> tuple[str, str]:
    """``(change, interval)``: percentage points for rates, else relative, else absolute."""
    diff, rel = row.get("diff"), row.get("rel")
    if _unit(row) == "rate" and isinstance(diff, int | float):
        return f"{_signed(diff * 100)} pp", _interval(row.get("ci"), 100.0, " pp")
    if isinstance(rel, int | float):
        return f"{_signed(rel * 100)}%", _interval(row.get("rel_ci"), 100.0, "%")
    if isinstance(diff, int | float):
        return _signed(diff), _interval(row.get("ci"), 1.0, "")
    return NA, NA


def _verdict(row: Mapping[str, Any]) -> Verdict:
    label = str(row.get("label") or row.get("metric") or "?")
    change, ci = _change(row)
    text = str(row.get("verdict", ""))
    return Verdict(_tone(row), label, _value(row, "a"), _value(row, "b"), change, ci, text)


def _headline(comparison: Mapping[str, Any], verdicts: Sequence[Verdict], title: str) -> str:
    """The comparison's ``summary``, or one built like it from the verdicts."""
    if comparison.get("summary"):
        return str(comparison["summary"])
    words = {"better": "better on", "worse": "worse on", "inconclusive": "inconclusive on"}
    words["same"] = "no meaningful difference on"
    parts = [
        f"{words[tone]} {', '.join(v.label for v in verdicts if v.tone == tone)}"
        for tone in ("worse", "better", "inconclusive", "same")
        if any(v.tone == tone for v in verdicts)
    ]
    return f"{title}: {'; '.join(parts)}" if parts else f"{title}: nothing compared"


def _method(comparison: Mapping[str, Any]) -> tuple[str, float]:
    method = comparison.get("method")
    method = method if isinstance(method, Mapping) else {}
    rows = [r for r in comparison.get("metrics", []) if isinstance(r, Mapping)]
    confidence = method.get("confidence", 0.95)
    confidence = float(confidence) if isinstance(confidence, int | float) else 0.95
    n_boot = method.get("n_boot") or next((r["n_boot"] for r in rows if "n_boot" in r), None)
    parts = [str(method.get("name", "paired bootstrap"))]
    if method.get("max_sections"):
        parts.append(f"up to {method['max_sections']} sections of consecutive arrivals")
    if method.get("block_length"):
        parts.append(f"blocks of {method['block_length']:,} requests")
    if isinstance(n_boot, int):
        parts.append(f"{n_boot:,} resamples")
    parts.append(f"{confidence * 100:g}% confidence intervals")
    text = ", ".join(parts)
    min_effect = comparison.get("min_effect")
    if isinstance(min_effect, int | float) and min_effect > 0:
        text += f"; changes within ±{min_effect * 100:g}% count as the same"
    return text, confidence


def comparison_summaries(results: Mapping[str, Any]) -> list[ComparisonSummary]:
    """Every comparison, verdicts ordered worse, better, inconclusive, same (stable)."""
    out = []
    for comparison in results.get("comparisons", []):
        rows = [r for r in comparison.get("metrics", []) if isinstance(r, Mapping)]
        verdicts = sorted((_verdict(r) for r in rows), key=lambda v: TONES.index(v.tone))
        base, policy = str(comparison.get("baseline", "?")), str(comparison.get("policy", "?"))
        n = comparison.get("n_requests")
        method, confidence = _method(comparison)
        out.append(
            ComparisonSummary(
                baseline=base,
                policy=policy,
                n_requests=n if isinstance(n, int) else None,
                headline=_headline(comparison, verdicts, f"{policy} vs {base}"),
                flags=_flags(comparison.get("flags")),
                verdicts=verdicts,
                method=method,
                confidence=confidence,
            )
        )
    return out
