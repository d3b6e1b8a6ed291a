"""A tiny SVG line-chart helper for self-contained HTML reports (no dependencies)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from html import escape

Point = tuple[float, float]
MAX_POINTS = 600  # per line in a plot
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / target if span > 0 else 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if raw <= m * mag * (1 + 1e-9))


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    first = math.ceil(lo / step - 1e-9)
    return [k * step for k in range(first, math.floor(hi / step + 1e-9) + 1)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    mantissas = (1.0, 2.0, 5.0) if len(decades) <= 4 else (1.0,)
    ticks = [m * 10.0**d for d in decades for m in mantissas]
    return [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]


def _label(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"


def _scale(lo: float, hi: float, a: float, b: float, log: bool) -> Callable[[float], float]:
    f: Callable[[float], float] = math.log10 if log else float
    flo, fhi = f(lo), f(hi)
    return lambda v: a + (f(v) - flo) / (fhi - flo) * (b - a)


def _el(tag: str, text: str | None = None, **attrs: object) -> str:
    """One SVG element; ``class_`` becomes ``class``, floats keep one decimal."""
    items = [
        (k.rstrip("_").replace("_", "-"), f"{v:.1f}" if isinstance(v, float) else str(v))
        for k, v in attrs.items()
    ]
    head = " ".join([tag, *(f'{k}="{escape(v)}"' for k, v in items)])
    return f"<{head}/>" if text is None else f"<{head}>{escape(text)}</{tag}>"


def line_chart(
    series: Sequence[tuple[str, Sequence[Point]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    y_max: float | None = None,
) -> str:
    """An SVG line chart: one line per ``(name, points)``, with axes, ticks and a legend.

    ``log_x`` is honoured when every x is positive and they span at least a decade.
    """
    w, h, left, right, top, bottom = 680, 320, 64, 500, 30, 262
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    out = [f'<svg class="plot" role="img" viewBox="0 0 {w} {h}" width="{w}" height="{h}">']
    out += [_el("title", title), _el("text", title, x=left, y=18, class_="title")]
    if not xs:
        out.append(_el("text", "no samples", x=(left + right) / 2, y=h / 2, class_="axis"))
        return "\n".join([*out, "</svg>"])
    x_lo, x_hi = min(xs), max(xs)
    log = log_x and x_lo > 0 and x_hi / x_lo >= 10
    if x_hi == x_lo:
        x_lo, x_hi = (x_lo / 2, x_hi * 2) if log else (x_lo - 1, x_hi + 1)
    y_hi = y_max if y_max is not None else max(ys)
    y_hi = math.ceil(y_hi / _nice_step(y_hi) - 1e-9) * _nice_step(y_hi) if y_hi > 0 else 1.0
    sx, sy = _scale(x_lo, x_hi, left, right, log), _scale(0.0, y_hi, bottom, top, False)
    for t in _log_ticks(x_lo, x_hi) if log else _linear_ticks(x_lo, x_hi):
        out.append(_el("line", x1=sx(t), y1=top, x2=sx(t), y2=bottom, class_="grid"))
        out.append(_el("text", _label(t), x=sx(t), y=bottom + 16, class_="tick mid"))
    for t in _linear_ticks(0.0, y_hi):
        out.append(_el("line", x1=left, y1=sy(t), x2=right, y2=sy(t), class_="grid"))
        out.append(_el("text", _label(t), x=left - 6, y=sy(t) + 4, class_="tick end"))
    out.append(_el("rect", x=left, y=top, width=right - left, height=bottom - top, class_="frame"))
    x_text = x_label + (" (log scale)" if log else "")
    out.append(_el("text", x_text, x=(left + right) / 2, y=bottom + 38, class_="axis"))
    turn = f"translate(16 {(top + bottom) / 2}) rotate(-90)"
    out.append(_el("text", y_label, transform=turn, class_="axis"))
    for i, (name, pts) in enumerate(series):
        color, ly = PALETTE[i % len(PALETTE)], top + 8 + 20 * i
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if not log or x > 0)
        out.append(_el("polyline", points=coords, stroke=color, class_="line"))
        out.append(
            _el("line", x1=right + 14, y1=ly, x2=right + 38, y2=ly, stroke=color, class_="line")
        )
        short = name if len(name) <= 20 else name[:19] + "…"
        out.append(_el("text", short, x=right + 44, y=ly + 4, class_="legend"))
    return "\n".join([*out, "</svg>"])


def cdf_points(values: Iterable[float], max_points: int = MAX_POINTS) -> list[Point]:
    """``(value, percent of samples <= value)``, thinned to at most ``max_points``."""
    ordered = sorted(values)
    n = len(ordered)
    keep: Iterable[int] = range(n)
    if n > max_points:
        keep = sorted({round(k * (n - 1) / (max_points - 1)) for k in range(max_points)})
    return [(ordered[i], (i + 1) * 100.0 / n) for i in keep]


def downsample(points: Sequence[Point], max_points: int = MAX_POINTS) -> list[Point]:
    """At most ``max_points`` of a time series, keeping each bucket's lowest and highest y
    so spikes survive thinning."""
    if len(points) <= max_points:
        return list(points)
    n, buckets, out = len(points), max_points // 2, []
    for b in range(buckets):
        chunk = points[b * n // buckets : (b + 1) * n // buckets]
        lo, hi = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
        out += [lo] if lo is hi else sorted((lo, hi))
    return out
