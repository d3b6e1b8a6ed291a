"""Mixed workloads: two workloads replayed together, each as a class of traffic.

A mix spec (``.toml``/``.json``, told from a synthetic spec by its ``part`` list) names
two workloads, one per class, ``online`` (interactive) and ``offline`` (batch)::

    name = "online-offline"
    description = "interactive chat with a batch backlog"

    [[part]]
    class = "online"
    workload = "azure-conv"      # any workload: bundled, a file, poisson:/gamma:
    max_requests = 3000
    rate_scale = 2.0             # its own arrival-rate multiplier
    slo_ttft_ms = 1000           # targets for requests without their own
    slo_tpot_ms = 50

    [[part]]
    class = "offline"
    workload = "azure-code"
    max_requests = 400
    arrival = "backlog"          # every request submitted at start_s ("trace": as recorded)
    deadline_s = 900             # each must finish within this many seconds of arrival

Each request's tenant becomes its class and its priority the part's (``0`` online, ``1``
offline unless given): per-tenant breakdowns are per class, and a policy sees the class
through ``tenant`` and ``priority`` on every engine. Request ids are prefixed with the
class. A part's file path is read relative to the mix file; a mix cannot contain a mix.
``schedkit bench --rate-scale`` then scales the mixed stream (a backlog stays at its start).
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import parse_document
from schedkit.workload.model import TraceRequest, Workload
from schedkit.workload.synthetic import validated

__all__ = ["MixSpec", "is_mix", "mix_workload"]

CLASSES = ("online", "offline")
_IN_MIX = contextvars.ContextVar("schedkit_in_mix", default=False)


class PartSpec(BaseModel):
    """One class's workload and how it joins the mix."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, populate_by_name=True
    )

    request_class: Literal["online", "offline"] = Field(alias="class")
    workload: str = Field(min_length=1)
    max_requests: int | None = Field(default=None, ge=1)
    rate_scale: float = Field(default=1.0, gt=0, le=1e6)
    arrival: Literal["trace", "backlog"] = "trace"
    start_s: float = Field(default=0.0, ge=0, le=1e9)
    priority: int | None = Field(default=None, ge=-1000, le=1000)
    slo_ttft_ms: float | None = Field(default=None, gt=0)
    slo_tpot_ms: float | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0, le=1e9)


class MixSpec(BaseModel):
    """Two parts, one per class."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1)
    description: str = ""
    source: str = ""
    part: list[PartSpec] = Field(min_length=2, max_length=2)

    @model_validator(mode="after")
    def _one_per_class(self) -> MixSpec:
        classes = [p.request_class for p in self.part]
        if sorted(classes) != sorted(CLASSES):
            raise ValueError(f"a mix has one part of each class, online and offline; got {classes}")
        return self


def is_mix(text: str, fmt: Literal["toml", "json"]) -> bool:
    """Whether a spec document is a mix (it has a ``part`` list); False when unreadable,
    so the synthetic parser reports the syntax error."""
    try:
        data = parse_document(text, fmt)
    except ValueError:
        return False
    return isinstance(data, dict) and "part" in data


Loader = Callable[..., Workload]


def mix_workload(
    text: str,
    *,
    origin: str,
    fmt: Literal["toml", "json"],
    seed: int,
    base: Path | None,
    load: Loader,
) -> Workload:
    """The workload a mix spec describes: its parts loaded with ``load`` (the loader's
    ``load_workload``), shaped and labelled by class, merged by arrival."""
    spec = validated(MixSpec, text, origin, fmt, "mix spec", __name__)
    if _IN_MIX.get():
        raise SchedkitError(f"{origin}: a mix's part cannot itself be a mix; name plain workloads")
    token = _IN_MIX.set(True)
    try:
        parts = [_part(p, load, seed, base, origin) for p in spec.part]
    finally:
        _IN_MIX.reset(token)
    blocks = {w.hash_block_tokens for w, _ in parts} - {0}
    if len(blocks) > 1:
        raise SchedkitError(
            f"{origin}: the parts hash prefixes in different block sizes {sorted(blocks)};"
            " mix workloads whose hash_ids use the same block size"
        )
    requests = [r for _, requests in parts for r in requests]
    requests.sort(key=lambda r: r.arrival_s)  # stable: ties keep the parts' order
    source = spec.source or "mix of " + "; ".join(
        f"{p.request_class}: {w.source or w.name}"
        for p, (w, _) in zip(spec.part, parts, strict=True)
    )
    return Workload(spec.name, tuple(requests), blocks.pop() if blocks else 0, source, mixed=True)


def _part(
    part: PartSpec, load: Loader, seed: int, base: Path | None, origin: str
) -> tuple[Workload, list[TraceRequest]]:
    """A part's workload and its requests as the mix replays them."""
    name = part.workload
    if base is not None and not Path(name).is_absolute() and (base / name).exists():
        name = str(base / name)
    try:
        workload = load(name, seed=seed, max_requests=part.max_requests)
    except SchedkitError as exc:
        raise SchedkitError(f"{origin}, {part.request_class} part: {exc}") from None
    if workload.mixed:
        raise SchedkitError(f"{origin}: a mix's part cannot itself be a mix; name plain workloads")
    shaped = workload.scaled(part.rate_scale)
    if part.arrival == "backlog":
        shaped = shaped.at_once()
    cls = part.request_class
    priority = part.priority if part.priority is not None else CLASSES.index(cls)
    requests = [
        dataclasses.replace(
            r,
            request_id=f"{cls}-{r.request_id}",
            arrival_s=r.arrival_s + part.start_s,
            tenant=cls,
            priority=priority,
            slo_ttft_ms=r.slo_ttft_ms if r.slo_ttft_ms is not None else part.slo_ttft_ms,
            slo_tpot_ms=r.slo_tpot_ms if r.slo_tpot_ms is not None else part.slo_tpot_ms,
            deadline_s=part.deadline_s if part.deadline_s is not None else r.deadline_s,
        )
        for r in shaped.requests
    ]
    if not requests:
        raise SchedkitError(f"{origin}, {cls} part: workload {quote(part.workload)} is empty")
    return workload, requests
