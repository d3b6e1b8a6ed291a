"""Calibrating the linear cost model: read measured engine steps, fit, save the profile.

A steps file is a CSV, one measured step a row, with at least the columns
``prefill_tokens,decode_tokens,kv_tokens,seconds`` (any order; ``attn_pairs``,
``start_s``, ``end_s``, ``batch_size``, ``num_running`` and ``num_waiting`` are read
when present, as ``--record-steps`` writes them). An optional first line
``# schedkit-steps {"engine": ..., "model": ..., "gpu": ..., "tp": ...}`` says what was
recorded. ``schedkit.sim.cost.fit.fit_steps`` fits it (NNLS, error on held-out steps); the
cost profile (JSON) stores the coefficients, the errors and what they were recorded
for, for ``schedkit bench --profile``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import decode_text, parse_document, read_document, read_lines
from schedkit.records import META_PREFIX, STEP_COLUMNS
from schedkit.sim.cost.fit import Calibration, StepRow
from schedkit.sim.cost.model import LinearCostModel, RooflineCostModel
from schedkit.sim.cost.operators import OperatorCostModel, fits_for, supports
from schedkit.sim.cost.profiles import (
    GPUProfile,
    ModelProfile,
    check_tp,
    get_gpu,
    get_model,
    gpu_for_device,
    load_profile_file,
    model_for_engine_name,
    register_model_dir,
)

__all__ = [
    "META_PREFIX",
    "REQUIRED_COLUMNS",
    "STEP_COLUMNS",
    "StepCostModel",
    "default_cost_model",
    "load_cost_profile",
    "make_cost_model",
    "profile_mismatch",
    "read_steps",
    "reference_names",
    "save_cost_profile",
]

log = logging.getLogger("schedkit")

StepCostModel = RooflineCostModel | OperatorCostModel | LinearCostModel

REQUIRED_COLUMNS = ("prefill_tokens", "decode_tokens", "kv_tokens", "seconds")
_INTEGERS = frozenset(STEP_COLUMNS) - {"start_s", "end_s", "seconds"}


def read_steps(path: str | Path) -> tuple[list[StepRow], dict[str, Any]]:
    """The steps of a steps file, and what it says was recorded (``{}`` when nothing)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = read_lines(f, f"steps file {path}")
    except OSError as exc:
        raise SchedkitError(f"cannot read steps file {path}: {exc.strerror}") from exc
    header_text = ",".join(REQUIRED_COLUMNS)
    text = decode_text(data, f"steps file {path}", f"a CSV with at least the columns {header_text}")
    lines = text.splitlines()
    meta: dict[str, Any] = {}
    if lines and lines[0].startswith(META_PREFIX):
        try:
            loaded = json.loads(lines[0][len(META_PREFIX) :])
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict):
            raise SchedkitError(
                f"{path}, line 1: {META_PREFIX.strip()} must be followed by a JSON object"
            )
        meta = loaded
        lines = ["", *lines[1:]]  # keep line numbers
    reader = csv.reader(lines)
    columns: list[str] | None = None
    rows: list[StepRow] = []
    for fields in reader:
        cells = [cell.strip() for cell in fields]
        if not any(cells):
            continue
        where = f"{path}, line {reader.line_num}"
        if columns is None:
            missing = [c for c in REQUIRED_COLUMNS if c not in cells]
            if missing:
                raise SchedkitError(
                    f"{where}: the header lacks the column {quote(missing[0])}; a steps file"
                    f" needs {header_text} (and may have {', '.join(STEP_COLUMNS)})"
                )
            columns = cells
            continue
        if len(cells) != len(columns):
            raise SchedkitError(f"{where}: expected {len(columns)} fields, got {len(cells)}")
        rows.append(_parse_step(dict(zip(columns, cells, strict=True)), where))
    if columns is None:
        raise SchedkitError(f"steps file {path} is empty; expected a header and rows")
    return rows, meta


def _parse_step(cells: dict[str, str], where: str) -> StepRow:
    values: dict[str, Any] = {}
    for name in STEP_COLUMNS:
        cell = cells.get(name)
        if cell is None or cell == "":
            continue
        if name in _INTEGERS:
            if not (cell.isdigit() and len(cell) <= 18):
                raise SchedkitError(f"{where}: {name} must be an integer >= 0, got {quote(cell)}")
            values[name] = int(cell)
            continue
        try:
            number = float(cell)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0 or (name == "seconds" and number == 0):
            need = "> 0" if name == "seconds" else ">= 0"
            raise SchedkitError(f"{where}: {name} must be a number {need}, got {quote(cell)}")
        values[name] = number
    if "seconds" not in values:
        raise SchedkitError(f"{where}: seconds is empty; every step needs its measured time")
    return StepRow(
        prefill_tokens=values.get("prefill_tokens", 0),
        decode_tokens=values.get("decode_tokens", 0),
        kv_tokens=values.get("kv_tokens", 0),
        seconds=values["seconds"],
        attn_pairs=values.get("attn_pairs", 0),
        start_s=values.get("start_s"),
        end_s=values.get("end_s"),
        num_running=values.get("num_running"),
    )


class _LinearProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["linear"]
    c0: float = Field(ge=0, allow_inf_nan=False)
    c_prefill: float = Field(ge=0, allow_inf_nan=False)
    c_decode: float = Field(ge=0, allow_inf_nan=False)
    c_kv: float = Field(ge=0, allow_inf_nan=False)
    c_attn: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    mape: float | None = Field(default=None, ge=0)  # held out (the training error before 0.3)
    source: str = ""
    recorded_for: dict[str, Any] = Field(default_factory=dict)  # engine, model, gpu, tp
    fit: dict[str, Any] = Field(default_factory=dict)  # Calibration.describe()


def save_cost_profile(
    calibration: Calibration, path: str | Path, source: str, recorded_for: dict[str, Any]
) -> None:
    """Write a fit as JSON: the coefficients, the held-out error, what it was recorded for."""
    held_out = calibration.holdout.get("all", {}).get("mape")
    document = {
        **calibration.model.describe(),
        "mape": held_out,
        "source": source,
        "recorded_for": recorded_for,
        "fit": calibration.describe(),
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")


def _recorded_for(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    value = data.get("recorded_for") if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def profile_mismatch(path: str | Path, model: str, gpu: str, tp: int) -> str | None:
    """A warning when the profile at ``path`` was recorded for another model, GPU or TP
    than the bench uses; None when they agree or the profile does not say."""
    recorded = _recorded_for(path)
    differ = [
        f"{name} {recorded[name]!r} (the bench: {ours!r})"
        for name, ours in (("model", model), ("gpu", gpu), ("tp", tp))
        if name in recorded and not _same(name, str(recorded[name]), str(ours))
    ]
    if not differ:
        return None
    return (
        f"cost profile {path} was recorded with {', '.join(differ)}: its step times may not"
        " hold here; record and fit one for this deployment (docs/calibration.md)"
    )


def _same(field: str, recorded: str, ours: str) -> bool:
    """Whether a recorded model or GPU, as the engine named it (``meta-llama/Meta-Llama-3-8B``,
    ``NVIDIA H100 80GB HBM3``), is the profile the bench uses (``Llama-3-8B``, ``H100-SXM``)."""
    if recorded.lower() == ours.lower():
        return True
    found: ModelProfile | GPUProfile | None = None
    if field == "model":
        found = model_for_engine_name(recorded)
    elif field == "gpu":
        found = gpu_for_device(recorded)
    return found is not None and found.name.lower() == ours.lower()


DEFAULT_REFERENCE = ("Llama-3-8B", "H100-SXM")


def reference_names(
    meta: dict[str, Any], model: str | None, gpu: str | None
) -> tuple[str, str, list[str]]:
    """The model and GPU profiles of the roofline reference a fit falls back on: the
    ones asked for, else those of the model and device the steps file names, else
    Llama-3-8B on H100-SXM; with a note for each one the file named but no profile fits."""
    notes = []
    if model is None:
        recorded = str(meta.get("model") or "")
        found = model_for_engine_name(recorded) if recorded else None
        model = found.name if found else register_model_dir(recorded) if recorded else None
        if model is None:
            model = DEFAULT_REFERENCE[0]
            if recorded:
                notes.append(f"no model profile fits the recorded model {recorded!r}")
    if gpu is None:
        recorded = str(meta.get("gpu") or "")
        found_gpu = gpu_for_device(recorded) if recorded and recorded != "cpu" else None
        gpu = found_gpu.name if found_gpu else DEFAULT_REFERENCE[1]
        if recorded and found_gpu is None:
            what = (
                "on a CPU" if recorded == "cpu" else f"on {recorded!r}, which no GPU profile fits"
            )
            notes.append(f"the steps were recorded {what}")
    return model, gpu, notes


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


def default_cost_model(
    model: ModelProfile, gpu: GPUProfile, tp: int, *, async_scheduling: bool = True
) -> OperatorCostModel | RooflineCostModel:
    """The per-operator model where schedkit has fits for ``gpu`` and they cover ``model``
    (a dense GQA model); else the roofline (a user's GPU profile, MoE or MLA models)."""
    if supports(model) and fits_for(gpu) is not None:
        return OperatorCostModel(model, gpu, tp, async_scheduling=async_scheduling)
    return RooflineCostModel(model, gpu, tp)


def make_cost_model(
    model_name: str,
    gpu_name: str,
    tp: int,
    profile_path: str | Path | None,
    *,
    async_scheduling: bool = True,
) -> tuple[StepCostModel, ModelProfile, GPUProfile]:
    """The bench's cost model and the profiles it sizes the KV cache from.

    ``profile_path`` may be a fitted cost profile (JSON with ``"kind": "linear"``), whose
    model then times steps; or a GPU/model profile file, registered before the lookup.
    Without one, :func:`default_cost_model` times steps.
    """
    timing: LinearCostModel | None = None
    if profile_path is not None:
        if _is_cost_profile(Path(profile_path)):
            timing = load_cost_profile(profile_path)
        else:
            load_profile_file(profile_path)
    model, gpu = get_model(model_name), get_gpu(gpu_name)
    check_tp(model, tp)  # a fitted profile ignores tp, but the KV cache is sized with it
    if timing is None:
        return default_cost_model(model, gpu, tp, async_scheduling=async_scheduling), model, gpu
    return timing, model, gpu


def _is_cost_profile(path: Path) -> bool:
    if path.suffix != ".json":
        return False
    try:
        data = parse_document(read_document(path, "profile file", "a JSON file"), "json")
    except (SchedkitError, ValueError):
        return False  # let the profile loader report it
    return isinstance(data, dict) and "kind" in data
