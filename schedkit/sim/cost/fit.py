"""Fitting step times: a non-negative least-squares fit with its held-out error.

The model is the linear cost model (``LinearCostModel``): a per-step constant plus
seconds per prefill token (compute), per decode token, per KV token read (memory
traffic) and per query-key pair (attention). Those are the roofline's terms, made
linear. The fit is ``scipy.optimize.nnls``, each row weighted by 1/sqrt(its measured
time): the noise of a step grows with its length (variance about proportional to it),
and the simulator's latencies are sums of step times, so a long step may not be
fitted worse than a short one in proportion (pure relative error, which fits many
short decode steps and underestimates the long mixed ones that queues wait behind) nor
outweigh a thousand short ones (absolute error). The steps are
split by time: the first ``1 - test_share`` are fitted, and the error is measured on
the rest. A feature that never varies in the fitted steps (no attention column, batch
size always 1) cannot be told apart from the constant. Its coefficient stays at the
roofline's value, with a warning naming it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedkit.errors import SchedkitError
from schedkit.sim.cost.model import LINEAR_COEFFICIENTS, LinearCostModel, RooflineCostModel

__all__ = [
    "MIN_STEPS", "Calibration", "StepRow", "fit_steps", "step_kind", "with_gaps",
]  # fmt: skip

TEST_SHARE = 0.3
MIN_STEPS = 20  # 14 fitted (about 3 per coefficient) and 6 held out, at the least
FEATURES = ("constant", "prefill_tokens", "decode_tokens", "kv_tokens", "attn_pairs")


@dataclass(frozen=True, slots=True)
class StepRow:
    """One measured engine step."""

    prefill_tokens: int
    decode_tokens: int
    kv_tokens: int
    seconds: float
    attn_pairs: int = 0
    start_s: float | None = None  # on the engine's clock; None: the file's order
    end_s: float | None = None
    num_running: int | None = None  # requests still running when the step ended


def step_kind(row: StepRow) -> str:
    """``prefill`` (no decode), ``decode`` (no prefill) or ``mixed``."""
    if row.decode_tokens == 0:
        return "prefill"
    return "decode" if row.prefill_tokens == 0 else "mixed"


@dataclass
class Calibration:
    model: LinearCostModel
    train_steps: int
    test_steps: int
    train_mape: float
    holdout: dict[str, dict[str, float]]  # kind ("all" too) -> n, mape, p90_ape
    fixed: dict[str, float] = field(default_factory=dict)  # coefficient -> roofline value
    warnings: list[str] = field(default_factory=list)
    gap_share: float = 0.0  # of the fitted time: between busy steps (``with_gaps``)

    def describe(self) -> dict[str, Any]:
        return {
            "train_steps": self.train_steps,
            "test_steps": self.test_steps,
            "train_mape": self.train_mape,
            "holdout": self.holdout,
            "fixed_at_roofline": self.fixed,
            "gap_share": self.gap_share,
        }


def with_gaps(rows: Sequence[StepRow]) -> tuple[list[StepRow], float]:
    """``rows`` in start order, each busy step's time extended to the next step's start.

    The simulator's clock advances by step times alone, but a real engine spends time
    between steps too (processing outputs, taking in requests). After a step that left
    requests running, the engine starts the next step as soon as it can, so the gap
    belongs to the step. After one that left nothing running, the engine idled, and the
    gap is not counted. Needs ``start_s``, ``end_s`` and ``num_running``. Returns the
    rows and the share of the time the gaps added."""
    ordered = sorted(rows, key=lambda r: r.start_s or 0.0)
    out, added = [], 0.0
    for row, nxt in zip(ordered, [*ordered[1:], None], strict=True):
        gap = 0.0
        busy = nxt is not None and row.end_s is not None and nxt.start_s is not None
        if busy and row.num_running and nxt is not None and nxt.start_s is not None:
            gap = max(0.0, nxt.start_s - (row.end_s or 0.0))
        added += gap
        out.append(dataclasses.replace(row, seconds=row.seconds + gap) if gap else row)
    total = sum(r.seconds for r in out)
    return out, added / total if total > 0 else 0.0


def _check(rows: Sequence[StepRow]) -> None:
    if len(rows) < MIN_STEPS:
        raise SchedkitError(
            f"calibration needs at least {MIN_STEPS} steps ({MIN_STEPS - 6} to fit"
            f" {len(FEATURES)} coefficients, 6 held out to measure the error), got"
            f" {len(rows)}; record a longer run"
        )
    for i, r in enumerate(rows):
        if min(r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs) < 0:
            raise SchedkitError(f"step {i}: token counts must be >= 0")
        if r.prefill_tokens + r.decode_tokens == 0:
            raise SchedkitError(f"step {i} scheduled no tokens; drop empty steps")
        if not (math.isfinite(r.seconds) and r.seconds > 0):
            raise SchedkitError(f"step {i}: seconds must be > 0, got {r.seconds}")


def _features(rows: Sequence[StepRow]) -> np.ndarray:
    return np.array(
        [[1.0, r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs] for r in rows],
        dtype=np.float64,
    )


def _errors(model: LinearCostModel, rows: Sequence[StepRow]) -> np.ndarray:
    predicted = np.array(
        [
            model.step_time(r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs)
            for r in rows
        ]
    )
    measured = np.array([r.seconds for r in rows])
    return np.asarray(np.abs(predicted - measured) / measured)


def fit_steps(
    rows: Sequence[StepRow], roofline: RooflineCostModel, *, test_share: float = TEST_SHARE
) -> Calibration:
    """Fit the first ``1 - test_share`` of ``rows`` (by start time) and measure the
    error on the rest (module docstring)."""
    _check(rows)
    ordered, gap_share = _in_time_order(rows)
    cut = len(ordered) - max(6, math.ceil(test_share * len(ordered)))
    train, test = ordered[:cut], ordered[cut:]
    x = _features(train)
    fixed, warnings = _constant_features(x, roofline.linear_coefficients())
    coef = _fit(x, np.array([r.seconds for r in train]), fixed)
    model = LinearCostModel(*(coef[name] for name in LINEAR_COEFFICIENTS))
    return Calibration(
        model=model,
        train_steps=len(train),
        test_steps=len(test),
        train_mape=float(_errors(model, train).mean()),
        holdout=_holdout(model, test),
        fixed=fixed,
        warnings=warnings,
        gap_share=gap_share,
    )


def _in_time_order(rows: Sequence[StepRow]) -> tuple[list[StepRow], float]:
    """``rows`` by start time (in the file's order without one), with the gaps between busy
    steps added where the rows say when each ended and what still ran (:func:`with_gaps`),
    and the share of the time those gaps are."""
    timed = all(r.start_s is not None for r in rows)
    if timed and all(r.end_s is not None and r.num_running is not None for r in rows):
        return with_gaps(rows)
    return (sorted(rows, key=lambda r: r.start_s or 0.0) if timed else list(rows)), 0.0


def _constant_features(
    x: np.ndarray, reference: dict[str, float]
) -> tuple[dict[str, float], list[str]]:
    """The coefficients of features that never vary in the fitted steps, kept at the
    roofline's values (``reference``), and a warning naming each."""
    fixed: dict[str, float] = {}
    warnings: list[str] = []
    for j in range(1, len(FEATURES)):
        column = x[:, j]
        if column.max() == column.min():
            name = LINEAR_COEFFICIENTS[j]
            fixed[name] = reference[name]
            warnings.append(
                f"{FEATURES[j]} never varies in the {len(x)} fitted steps (always"
                f" {column[0]:g}): {name} cannot be told apart from the per-step constant,"
                f" so it stays at the roofline's value, {reference[name]:.3g}"
            )
    return fixed, warnings


def _fit(x: np.ndarray, y: np.ndarray, fixed: dict[str, float]) -> dict[str, float]:
    """Every coefficient: the ``fixed`` ones, the others from the non-negative least-squares
    fit of what the fixed ones leave of ``y``, each row weighted by 1/sqrt(its time)."""
    from scipy.optimize import nnls

    free = [j for j in range(len(FEATURES)) if LINEAR_COEFFICIENTS[j] not in fixed]
    offset = np.zeros(len(y))  # what the fixed coefficients already explain
    for j, name in enumerate(LINEAR_COEFFICIENTS):
        if name in fixed:
            offset += x[:, j] * fixed[name]
    target = y - offset
    weight = 1.0 / np.sqrt(y)  # variance about proportional to the step's time
    a = x[:, free] * weight[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(a / scale, target * weight)
    coef = dict(fixed)
    for j, value in zip(free, solution / scale, strict=True):
        coef[LINEAR_COEFFICIENTS[j]] = float(max(value, 0.0))
    return coef


def _holdout(model: LinearCostModel, test: Sequence[StepRow]) -> dict[str, dict[str, float]]:
    """The held-out error (n, mape, p90_ape) of all steps and of each kind present."""
    holdout: dict[str, dict[str, float]] = {}
    test_errors = _errors(model, test)
    kinds = np.array([step_kind(r) for r in test])
    for kind in ("all", "prefill", "decode", "mixed"):
        mask = np.ones(len(test), bool) if kind == "all" else kinds == kind
        if mask.any():
            e = test_errors[mask]
            holdout[kind] = {
                "n": int(mask.sum()),
                "mape": float(e.mean()),
                "p90_ape": float(np.percentile(e, 90)),
            }
    return holdout
