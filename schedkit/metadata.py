"""Per-request metadata that decides who gets served: tenant, priority, SLO targets.

Engines carry it differently (vLLM: ``SamplingParams.extra_args`` from ``vllm_xargs``;
SGLang: ``sampling_params.custom_params``), but it means the same everywhere: a tenant is
a non-empty string (``"default"`` when absent), a priority an int where lower is served
first (0 when absent), an SLO target a finite, positive number of milliseconds (absent
otherwise). Values that do not fit are treated as absent, never as a number that sorts
first: a NaN target compares false with everything and would break an EDF order. Who may
set these values, and their bounds, is ``schedkit.trust``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_TENANT", "RequestMetadata", "parse_metadata", "parse_priority", "parse_slo"]

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class RequestMetadata:
    tenant: str = DEFAULT_TENANT
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0  # lower first; set where a trust config resolves it (schedkit.trust)


def parse_slo(value: object) -> float | None:
    """A target in ms, or None when ``value`` is absent, not a number, or not finite > 0."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def parse_priority(value: object) -> int:
    """An engine's priority field as schedkit's int (lower first); absent means 0."""
    if value is None or isinstance(value, bool):
        return 0
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError, OverflowError):
        return 0


def parse_metadata(extra: Mapping[str, Any] | None) -> RequestMetadata:
    """Tenant and SLO targets from a request's extra arguments (keys ``tenant``,
    ``slo_ttft_ms``, ``slo_tpot_ms``); anything else in the mapping is ignored."""
    if not isinstance(extra, Mapping) or not extra:
        return _EMPTY
    tenant = extra.get("tenant")
    return RequestMetadata(
        tenant=str(tenant) if tenant not in (None, "") else DEFAULT_TENANT,
        slo_ttft_ms=parse_slo(extra.get("slo_ttft_ms")),
        slo_tpot_ms=parse_slo(extra.get("slo_tpot_ms")),
    )


_EMPTY = RequestMetadata()
