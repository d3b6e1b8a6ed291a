"""Tiny SVG charts for self-contained HTML reports (no dependencies): lines, dots, bars.

Every chart is one ``<svg class="plot">`` with a ``viewBox``, so a page can size it with CSS;
its look comes from the page's classes (``title``, ``tick``, ``axis``, ``grid``, ``frame``,
``line``, ``dot``, ``bar``, ``ref``, ``legend``; :data:`MARK_CSS` for ``level``, ``mark``,
``mark-label``, ``ref-label`` and ``whisker``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape

Point = tuple[float, float]
Series = Sequence[tuple[str, Sequence[Point]]]
MAX_POINTS = 600  # per line in a plot
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
# how a page draws levels, marks and whiskers (the plan's and the sweep's pages add it)
MARK_CSS = (
    ".plot .level{stroke:#cf222e} .plot .mark{fill:none;stroke:#1f2328;stroke-width:2}"
    " .plot .mark-label{font-size:12px;font-weight:700} .plot .whisker{stroke-width:1.4}"
    " .plot .ref-label,.plot .mark-label{paint-order:stroke;stroke:#fff;stroke-width:3px}"
)
# the plot area inside the 680 x 320 view box; the legend sits right of it
W, H, LEFT, RIGHT, TOP, BOTTOM = 680, 320, 64, 500, 30, 262


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


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _label(v: float) -> str:
    if 0 < abs(v) < 1e-3:  # 10⁻⁵, not 1e-05
        exponent = math.floor(math.log10(abs(v)) + 1e-9)
        mantissa = v / 10.0**exponent
        power = "10" + str(exponent).translate(_SUPERSCRIPT)
        return power if abs(mantissa - 1) < 1e-9 else f"{mantissa:g}\u00d7{power}"
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


def _dot(cx: float, cy: float, r: float) -> str:
    """``_el("circle", cx=cx, cy=cy, r=r)``, the same text without its general formatting
    (a scatter plot draws thousands): numbers need no escaping."""
    return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}"/>'


def _open(title: str) -> list[str]:
    return [
        f'<svg class="plot" role="img" viewBox="0 0 {W} {H}" width="{W}" height="{H}">',
        _el("title", title),
        _el("text", title, x=LEFT, y=18, class_="title"),
    ]


def _empty(title: str, text: str) -> str:
    note = _el("text", text, x=(LEFT + RIGHT) / 2, y=H / 2, class_="axis")
    return "\n".join([*_open(title), note, "</svg>"])


def _linear_axis(lo: float, hi: float) -> tuple[float, float]:
    return (lo - 1, hi + 1) if hi == lo else (lo, hi)


_STEPS = (1.0, 2.0, 5.0)


def _log_axis(lo: float, hi: float) -> tuple[float, float] | None:
    """``lo .. hi`` widened to the nearest 1, 2 or 5 times a power of ten, or None when
    they do not span a decade."""
    if lo <= 0 or hi / lo < 10:
        return None
    d_lo, d_hi = math.floor(math.log10(lo) + 1e-9), math.floor(math.log10(hi) - 1e-9)
    below = max(m * 10.0**d_lo for m in _STEPS if m * 10.0**d_lo <= lo * (1 + 1e-9))
    above = [m * 10.0**d for d in (d_hi, d_hi + 1) for m in _STEPS]
    return below, min(v for v in above if v >= hi * (1 - 1e-9))


def _nice_top(hi: float) -> float:
    return math.ceil(hi / _nice_step(hi) - 1e-9) * _nice_step(hi) if hi > 0 else 1.0


@dataclass
class _Axes:
    """One chart's coordinate maps and the SVG drawn so far (frame, ticks, labels)."""

    sx: Callable[[float], float]
    sy: Callable[[float], float]
    log_x: bool
    log_y: bool
    x_hi: float
    parts: list[str]

    def visible(self, x: float, y: float) -> bool:
        return (not self.log_x or x > 0) and (not self.log_y or y > 0)

    def reference(self, x: float, label: str, row: int = 0) -> None:
        """A dashed vertical line at ``x`` (a target, say), labelled near the bottom; the
        label of the ``row``-th line sits one line higher, so that close lines stay legible."""
        if (self.log_x and x <= 0) or x > self.x_hi:
            return
        at = self.sx(x)
        self.parts.append(_el("line", x1=at, y1=TOP, x2=at, y2=BOTTOM, class_="ref"))
        y = BOTTOM - 6 - 14 * row
        self.parts.append(_el("text", label, x=at + 4, y=y, class_="tick ref-label"))

    def level(self, y: float, label: str) -> None:
        """A dashed horizontal line at ``y`` (an SLO, a target), labelled at its right end."""
        if self.log_y and y <= 0:
            return
        at = self.sy(y)
        self.parts.append(_el("line", x1=LEFT, y1=at, x2=RIGHT, y2=at, class_="ref level"))
        self.parts.append(_el("text", label, x=RIGHT - 4, y=at - 4, class_="tick end ref-label"))

    def mark(self, x: float, y: float, label: str) -> None:
        """A ring around the point ``(x, y)`` (the answer), labelled beside it."""
        if not self.visible(x, y):
            return
        cx, cy = self.sx(x), self.sy(y)
        self.parts.append(_el("circle", cx=cx, cy=cy, r=7, class_="mark"))
        self.parts.append(_el("text", label, x=cx + 10, y=cy + 16, class_="mark-label"))

    def legend(self, names: Sequence[str], mark: Callable[[str, float], str]) -> None:
        for i, name in enumerate(names):
            y = TOP + 8 + 20 * i
            self.parts.append(mark(PALETTE[i % len(PALETTE)], y))
            self.parts.append(_el("text", _short(name, 20), x=RIGHT + 44, y=y + 4, class_="legend"))

    def done(self) -> str:
        return "\n".join([*self.parts, "</svg>"])


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _axes(
    title: str,
    xs: Sequence[float],
    ys: Sequence[float],
    *,
    x_label: str,
    y_label: str,
    log_x: bool,
    log_y: bool,
    y_min: float | None,
    y_max: float | None,
) -> _Axes:
    """Axes for these values. A log axis needs positive values spanning a decade (else the
    axis is linear) and is widened to whole decades; a linear y axis starts at 0 (or
    ``y_min``) and ends on a tick; a linear x axis spans the values."""
    xr = _log_axis(min(xs), max(xs)) if log_x else None
    x_lo, x_hi = xr or _linear_axis(min(xs), max(xs))
    positive = [y for y in ys if y > 0]
    yr = _log_axis(y_min or min(positive), y_max or max(positive)) if log_y and positive else None
    lx, ly = xr is not None, yr is not None
    y_lo, y_hi = yr or (
        min(0.0, min(ys)) if y_min is None else y_min,
        _nice_top(max(ys) if y_max is None else y_max),
    )
    sx, sy = _scale(x_lo, x_hi, LEFT, RIGHT, lx), _scale(y_lo, y_hi, BOTTOM, TOP, ly)
    out = _open(title)
    for t in _log_ticks(x_lo, x_hi) if lx else _linear_ticks(x_lo, x_hi):
        out.append(_el("line", x1=sx(t), y1=TOP, x2=sx(t), y2=BOTTOM, class_="grid"))
        out.append(_el("text", _label(t), x=sx(t), y=BOTTOM + 16, class_="tick mid"))
    for t in _log_ticks(y_lo, y_hi) if ly else _linear_ticks(y_lo, y_hi):
        out.append(_el("line", x1=LEFT, y1=sy(t), x2=RIGHT, y2=sy(t), class_="grid"))
        out.append(_el("text", _label(t), x=LEFT - 6, y=sy(t) + 4, class_="tick end"))
    out.append(_frame())
    x_text = x_label + (" (log scale)" if lx else "")
    out.append(_el("text", x_text, x=(LEFT + RIGHT) / 2, y=BOTTOM + 38, class_="axis"))
    out.append(_y_label(y_label + (" (log scale)" if ly else "")))
    return _Axes(sx, sy, lx, ly, x_hi, out)


def _frame() -> str:
    return _el("rect", x=LEFT, y=TOP, width=RIGHT - LEFT, height=BOTTOM - TOP, class_="frame")


def _y_label(text: str) -> str:
    turn = f"translate(16 {(TOP + BOTTOM) / 2}) rotate(-90)"
    return _el("text", text, transform=turn, class_="axis")


def _line_mark(color: str, y: float) -> str:
    return _el("line", x1=RIGHT + 14, y1=y, x2=RIGHT + 38, y2=y, stroke=color, class_="line")


def _dot_mark(color: str, y: float) -> str:
    return _el("circle", cx=RIGHT + 26, cy=y, r=4, fill=color, class_="key")


def line_chart(
    series: Series,
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    log_y: bool = False,
    y_min: float | None = None,
    y_max: float | None = None,
    references: Sequence[tuple[float, str]] = (),
    empty: str = "no samples",
    dots: Sequence[Sequence[Point]] = (),
    whiskers: Sequence[Sequence[tuple[float, float, float]]] = (),
    levels: Sequence[tuple[float, str]] = (),
    marks: Sequence[tuple[float, float, str]] = (),
) -> str:
    """An SVG line chart: one line per ``(name, points)``, with axes, ticks and a legend.

    ``log_x``/``log_y`` are honoured when every value on that axis is positive and they span
    at least a decade. ``references`` are dashed vertical lines ``(x, label)`` and
    ``levels`` dashed horizontal ones ``(y, label)`` (the y axis reaches them); ``marks``
    ring points ``(x, y, label)``; ``empty`` is the text shown when no series has a point.
    ``dots[i]`` and ``whiskers[i]`` (vertical bars ``(x, low, high)``, an interval) are
    drawn in series ``i``'s colour.
    """
    xs = [x for _, pts in series for x, _ in pts] + [x for d in dots for x, _ in d]
    ys = [y for _, pts in series for _, y in pts] + [y for d in dots for _, y in d]
    ys += [v for w in whiskers for _, lo, hi in w for v in (lo, hi)]
    ys += [y for y, _ in levels if not log_y or y > 0] if xs else []
    if not xs:
        return _empty(title, empty)
    ax = _axes(
        title, xs, ys, x_label=x_label, y_label=y_label, log_x=log_x, log_y=log_y,
        y_min=y_min, y_max=y_max,
    )  # fmt: skip
    for row, (x, label) in enumerate(references):
        ax.reference(x, label, row)
    for i, (_, pts) in enumerate(series):
        coords = " ".join(f"{ax.sx(x):.1f},{ax.sy(y):.1f}" for x, y in pts if ax.visible(x, y))
        color = PALETTE[i % len(PALETTE)]
        ax.parts.append(_el("polyline", points=coords, stroke=color, class_="line"))
    for i, pts in enumerate(dots):
        color = PALETTE[i % len(PALETTE)]
        rings = [_dot(ax.sx(x), ax.sy(y), 2.2) for x, y in pts if ax.visible(x, y)]
        ax.parts += [f'<g class="dots" fill="{color}">', *rings, "</g>"]
    for i, bars in enumerate(whiskers):
        color = PALETTE[i % len(PALETTE)]
        for x, lo, hi in bars:
            if ax.visible(x, lo) and ax.visible(x, hi):
                ax.parts.append(
                    _el("line", x1=ax.sx(x), y1=ax.sy(lo), x2=ax.sx(x), y2=ax.sy(hi),
                        stroke=color, class_="whisker")
                )  # fmt: skip
    for y, label in levels:  # over the lines: a target reads as one
        ax.level(y, label)
    for x, y, label in marks:
        ax.mark(x, y, label)
    ax.legend([name for name, _ in series], _line_mark)
    return ax.done()


def scatter_chart(
    series: Series,
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    log_y: bool = False,
    empty: str = "no samples",
) -> str:
    """An SVG scatter plot: one colour of translucent dots per ``(name, points)``."""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    if not xs:
        return _empty(title, empty)
    ax = _axes(
        title, xs, ys, x_label=x_label, y_label=y_label, log_x=log_x, log_y=log_y,
        y_min=None, y_max=None,
    )  # fmt: skip
    for i, (_, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        dots = [_dot(ax.sx(x), ax.sy(y), 1.8) for x, y in pts if ax.visible(x, y)]
        ax.parts += [f'<g class="dots" fill="{color}">', *dots, "</g>"]
    ax.legend([name for name, _ in series], _dot_mark)
    return ax.done()


def bar_chart(
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    title: str,
    y_label: str,
    empty: str = "no samples",
) -> str:
    """Grouped SVG bars: one group per category, one bar per ``(name, values)`` in it.

    A None value leaves a gap in its group.
    """
    values = [v for _, vs in series for v in vs if v is not None]
    if not categories or not values:
        return _empty(title, empty)
    y_hi = _nice_top(max(values))
    sy = _scale(0.0, y_hi, BOTTOM, TOP, False)
    out = _open(title)
    for t in _linear_ticks(0.0, y_hi):
        out.append(_el("line", x1=LEFT, y1=sy(t), x2=RIGHT, y2=sy(t), class_="grid"))
        out.append(_el("text", _label(t), x=LEFT - 6, y=sy(t) + 4, class_="tick end"))
    out += [_frame(), _y_label(y_label)]
    group = (RIGHT - LEFT) / len(categories)
    bar = group * 0.8 / max(len(series), 1)
    for c, category in enumerate(categories):
        x0 = LEFT + c * group + group * 0.1
        for i, (_, vs) in enumerate(series):
            v = vs[c] if c < len(vs) else None
            if v is None:
                continue
            top = sy(max(v, 0.0))
            color = PALETTE[i % len(PALETTE)]
            out.append(
                _el("rect", x=x0 + i * bar, y=top, width=bar * 0.92, height=BOTTOM - top,
                    fill=color, class_="bar")
            )  # fmt: skip
        label = _short(category, 14)
        out.append(_el("text", label, x=LEFT + (c + 0.5) * group, y=BOTTOM + 16, class_="tick mid"))
    for i, (name, _) in enumerate(series):
        y = TOP + 8 + 20 * i
        out.append(
            _el("rect", x=RIGHT + 18, y=y - 5, width=12, height=10, fill=PALETTE[i % len(PALETTE)])
        )
        out.append(_el("text", _short(name, 20), x=RIGHT + 44, y=y + 4, class_="legend"))
    return "\n".join([*out, "</svg>"])


# ---------------------------------------------------------------------------
# thinning
# ---------------------------------------------------------------------------


def cdf_points(values: Iterable[float], max_points: int = MAX_POINTS) -> list[Point]:
    """``(value, percent of samples <= value)``, thinned to at most ``max_points``."""
    ordered = sorted(values)
    n = len(ordered)
    keep: Iterable[int] = range(n)
    if n > max_points:
        keep = sorted({round(k * (n - 1) / (max_points - 1)) for k in range(max_points)})
    return [(ordered[i], (i + 1) * 100.0 / n) for i in keep]


def ccdf_points(values: Iterable[float], max_points: int = MAX_POINTS) -> list[Point]:
    """``(value, fraction of samples >= value)``: from 1 at the smallest down to 1/n.

    Thinned to at most ``max_points``, half spread evenly over the samples and half evenly
    over log(rank from the top), so on a log y axis the tail keeps its shape.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n <= max_points:
        keep = set(range(n))
    else:
        half = max_points // 2
        even = {round(k * (n - 1) / (half - 1)) for k in range(half)}
        # ranks from the top 1 .. n, log-spaced; index = n - rank
        tail = {n - round(n ** (k / (half - 1))) for k in range(half)}
        keep = even | tail
    return [(ordered[i], (n - i) / n) for i in sorted(keep)]


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
