"""Calibrating the linear cost model: fit step timings measured on an engine, save the fit.

The timings file is a CSV with the header ``prefill_tokens,decode_tokens,kv_tokens,seconds``,
one measured step a row; ``fit_linear`` turns the rows into a :class:`LinearCostModel` and its
mean absolute percentage error, and the cost profile (JSON) stores both for
``schedkit bench --profile``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import decode_text, parse_document, read_document, read_lines
from schedkit.sim.costmodel import LinearCostModel

__all__ = [
    "TIMINGS_HEADER",
    "TimingRow",
    "fit_linear",
    "load_cost_profile",
    "read_timings_csv",
    "save_cost_profile",
]

TimingRow = tuple[int, int, int, float]
TIMINGS_HEADER = ("prefill_tokens", "decode_tokens", "kv_tokens", "seconds")
_HEADER = ",".join(TIMINGS_HEADER)


def fit_linear(rows: Sequence[TimingRow]) -> tuple[LinearCostModel, float]:
    """Least-squares fit of c0, c_prefill, c_decode, c_kv (all >= 0); returns (model, MAPE)."""
    if len(rows) < 4:
        raise SchedkitError(
            f"fit_linear needs at least 4 timing rows (one per coefficient), got {len(rows)}"
        )
    for i, (prefill, decode, kv, seconds) in enumerate(rows):
        if min(prefill, decode, kv) < 0 or prefill + decode == 0:
            raise SchedkitError(f"timing row {i} needs token counts >= 0 and at least one token")
        if not (math.isfinite(seconds) and seconds > 0):
            raise SchedkitError(f"timing row {i} needs seconds > 0, got {seconds}")
    features = [[1.0, float(p), float(d), float(kv)] for p, d, kv, _ in rows]
    targets = [seconds for *_, seconds in rows]
    # Scale columns to max 1 so the normal equations stay well conditioned.
    scale = [max(abs(x[c]) for x in features) for c in range(4)]
    free = [c for c in range(4) if scale[c] > 0]
    scaled = [[x[c] / scale[c] if scale[c] else 0.0 for c in range(4)] for x in features]
    coef = [0.0] * 4
    while free:
        solution = _least_squares([[x[c] for c in free] for x in scaled], targets)
        coef = [0.0] * 4
        for c, value in zip(free, solution, strict=True):
            coef[c] = value
        worst = min(free, key=lambda c: coef[c])
        if coef[worst] >= 0:
            break
        free.remove(worst)  # clamp the most negative coefficient to 0 and refit the rest
    c0, c_prefill, c_decode, c_kv = (
        max(coef[c], 0.0) / scale[c] if scale[c] else 0.0 for c in range(4)
    )
    model = LinearCostModel(c0, c_prefill, c_decode, c_kv)
    mape = sum(abs(model.step_time(p, d, kv, 0) - s) / s for p, d, kv, s in rows) / len(rows)
    return model, mape


def _least_squares(x: list[list[float]], y: list[float]) -> list[float]:
    """Solve the normal equations (with a tiny ridge) by Gaussian elimination."""
    k = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * t for r, t in zip(x, y, strict=True)) for i in range(k)]
    ridge = 1e-12 * max(a[i][i] for i in range(k))  # keeps collinear columns solvable
    for i in range(k):
        a[i][i] += ridge
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for r in range(col + 1, k):
            factor = a[r][col] / a[col][col]
            for c in range(col, k):
                a[r][c] -= factor * a[col][c]
            b[r] -= factor * b[col]
    solution = [0.0] * k
    for i in reversed(range(k)):
        rest = sum(a[i][c] * solution[c] for c in range(i + 1, k))
        solution[i] = (b[i] - rest) / a[i][i]
    return solution


def read_timings_csv(path: str | Path) -> list[TimingRow]:
    """Rows of a ``prefill_tokens,decode_tokens,kv_tokens,seconds`` CSV; blank lines skipped."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = read_lines(f, f"timings file {path}")
    except OSError as exc:
        raise SchedkitError(f"cannot read timings file {path}: {exc.strerror}") from exc
    text = decode_text(data, f"timings file {path}", f"a CSV with the header {_HEADER}")
    reader = csv.reader(text.splitlines())
    rows: list[TimingRow] = []
    header_seen = False
    for fields in reader:
        cells = [cell.strip() for cell in fields]
        if not any(cells):
            continue
        where = f"{path}, line {reader.line_num}"
        if not header_seen:
            if tuple(cells) != TIMINGS_HEADER:
                raise SchedkitError(f"{where}: header must be {_HEADER}")
            header_seen = True
        else:
            rows.append(_parse_timing_row(cells, where))
    if not header_seen:
        raise SchedkitError(f"timings file {path} is empty; expected a header and rows")
    return rows


def _parse_timing_row(cells: list[str], where: str) -> TimingRow:
    if len(cells) != 4:
        raise SchedkitError(f"{where}: expected 4 fields, got {len(cells)}")
    counts = [int(c) if c.isdigit() and len(c) <= 18 else -1 for c in cells[:3]]
    for label, cell, count in zip(TIMINGS_HEADER, cells, counts, strict=False):
        if count < 0:
            raise SchedkitError(f"{where}: {label} must be an integer >= 0, got {quote(cell)}")
    try:
        seconds = float(cells[3])
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise SchedkitError(f"{where}: seconds must be a number > 0, got {quote(cells[3])}")
    return counts[0], counts[1], counts[2], seconds


class _LinearProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["linear"]
    c0: float = Field(ge=0, allow_inf_nan=False)
    c_prefill: float = Field(ge=0, allow_inf_nan=False)
    c_decode: float = Field(ge=0, allow_inf_nan=False)
    c_kv: float = Field(ge=0, allow_inf_nan=False)
    c_attn: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    mape: float | None = Field(default=None, ge=0)
    source: str = ""


def save_cost_profile(model: LinearCostModel, path: str | Path, mape: float, source: str) -> None:
    """Write a fitted model as JSON: ``{"kind": "linear", "c0": ..., "mape": ..., ...}``."""
    Path(path).write_text(json.dumps({**model.describe(), "mape": mape, "source": source}) + "\n")


def load_cost_profile(path: str | Path) -> LinearCostModel:
    path = Path(path)
    text = read_document(path, "cost profile", "the JSON that `schedkit calibrate` wrote")
    try:
        data = parse_document(text, "json")
    except ValueError as exc:
        raise SchedkitError(f"cost profile {path} is not valid JSON: {exc}") from None
    try:
        p = _LinearProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SchedkitError(f"invalid cost profile {path}: {problems}; refit it") from exc
    return LinearCostModel(p.c0, p.c_prefill, p.c_decode, p.c_kv, p.c_attn)
