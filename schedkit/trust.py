"""Operator-controlled trust for scheduling metadata: who a request's tenant, priority and
SLO targets may come from, and the bounds they must fit (``docs/trust.md``).

A request's body is written by the client, so by default nothing in it decides who gets
served: the tenant comes from a header the operator's gateway sets (``tenant_header``),
priority from the tenant's tier (``tenant_priority``, else 0), SLO targets from the
tenant's defaults. Each ``*_from_body`` switch lets the body speak, within bounds.

``TrustConfig.resolve`` is the one decision every engine's HTTP edge makes (vLLM's ASGI
middleware, SGLang's); invalid values (NaN, infinities, negative or non-numeric numbers,
overlong or unprintable strings) are ``Problem``s, which the edge answers with HTTP 400
naming the field, never a number that sorts first. ``TrustConfig.bound`` is the
scheduler-side defence in depth for requests that did not pass an edge (offline
``LLM(...)`` use, a server launched without the middleware): the same limits, with the
metadata treated as the operator's own and invalid values as absent.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schedkit.metadata import DEFAULT_TENANT, RequestMetadata

__all__ = ["DEFAULT_TRUST", "Problem", "TenantSlo", "TrustConfig"]

SLO_KEYS = ("slo_ttft_ms", "slo_tpot_ms")


@dataclass(frozen=True, slots=True)
class Problem:
    """One invalid input: ``field`` as the client wrote it (``"vllm_xargs.slo_ttft_ms"``,
    ``"priority"``, ``"header x-tenant-id"``) and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class TenantSlo(BaseModel):
    """SLO targets a tenant's requests get when the body gives none (or may not)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slo_ttft_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    slo_tpot_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class TrustConfig(BaseModel):
    """Where tenant, priority and SLO targets may come from, and their bounds.

    The defaults are safe for a server reachable by untrusted clients behind a gateway
    that sets ``x-tenant-id``: the body decides nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- tenant ----------------------------------------------------------------------
    tenant_header: str = Field(default="x-tenant-id", min_length=1, max_length=128)
    tenant_from_body: bool = False
    tenants: list[str] | None = None
    default_tenant: str = Field(default=DEFAULT_TENANT, min_length=1)
    max_tenant_len: int = Field(default=64, ge=1, le=4096)
    # -- priority (lower is served first) ----------------------------------------------
    priority_from_body: bool = False
    priority_range: tuple[int, int] = (-1000, 1000)
    tenant_priority: dict[str, int] = Field(default_factory=dict)
    # -- SLO targets, milliseconds ---------------------------------------------------
    slo_from_body: bool = False
    slo_ttft_ms_range: tuple[float, float] = (1.0, 3_600_000.0)
    slo_tpot_ms_range: tuple[float, float] = (1.0, 60_000.0)
    tenant_slo: dict[str, TenantSlo] = Field(default_factory=dict)
    # -- simulator replay ------------------------------------------------------------
    trace: Literal["trusted", "body"] = "trusted"
    """How the bench's simulator treats a trace's tenant/priority/SLO: ``trusted`` (the
    operator's data: only the bounds apply, results unchanged) or ``body`` (as a client's
    body claims, no header: the ``*_from_body`` switches apply)."""
    # -- the HTTP edge: bounds, and who may set the tenant header --------------------------
    max_body_bytes: int = Field(default=64 * 2**20, ge=1024)
    """Longer request bodies get HTTP 413 before they are read whole."""
    max_body_depth: int = Field(default=128, ge=4, le=512)
    """Bodies nested deeper get HTTP 400 (the engines' readers differ near 1,000)."""
    max_metadata_keys: int = Field(default=64, ge=4)
    max_metadata_bytes: int = Field(default=16_384, ge=256)
    """A metadata mapping (``vllm_xargs``, ``custom_params``, ``schedkit``) with more keys
    or a longer JSON form gets HTTP 400."""
    trusted_proxies: list[str] | None = None
    """Addresses (CIDRs) the tenant header is accepted from; others sending it get 403."""
    gateway_secret_header: str | None = Field(default=None, min_length=1, max_length=128)
    """A header whose value must equal ``$SCHEDKIT_GATEWAY_SECRET`` for the tenant header
    to be accepted; others sending the tenant header get 403."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str] | None) -> list[str] | None:
        for item in value or ():
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies: {item[:80]!r} is not an address or CIDR"
                    " (e.g. 10.0.0.0/8, 127.0.0.1, ::1)"
                ) from None
        return value

    @field_validator("gateway_secret_header")
    @classmethod
    def _lower_secret(cls, value: str | None) -> str | None:
        return None if value is None else value.strip().lower()

    @field_validator("tenant_header")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()  # HTTP header names are case-insensitive

    @model_validator(mode="after")
    def _check(self) -> TrustConfig:
        lo, hi = self.priority_range
        if lo > hi:
            raise ValueError(f"priority_range [{lo}, {hi}] is empty; give [low, high]")
        for name in ("slo_ttft_ms_range", "slo_tpot_ms_range"):
            low, high = getattr(self, name)
            if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
                raise ValueError(f"{name} [{low}, {high}] must be finite with 0 < low <= high")
        names = [self.default_tenant, *(self.tenants or ()), *self.tenant_priority]
        names += list(self.tenant_slo)
        for name in names:
            if _tenant_problem(name, self.max_tenant_len) is not None:
                raise ValueError(
                    f"tenant name {name[:80]!r} is {_tenant_problem(name, self.max_tenant_len)}"
                )
        for tenant, value in self.tenant_priority.items():
            if not lo <= value <= hi:
                raise ValueError(
                    f"tenant_priority[{tenant!r}] = {value} is outside priority_range"
                    f" [{lo}, {hi}]; widen the range or change the tier"
                )
        return self

    # -- the edge's decision -----------------------------------------------------------

    def resolve(
        self,
        header_tenant: str | None,
        body_fields: object,
        body_priority: object,
        *,
        body_name: str = "body",
    ) -> tuple[RequestMetadata, list[Problem]]:
        """A request's tenant, priority and SLO targets, and what was invalid.

        ``header_tenant`` is ``tenant_header``'s value (None when absent); ``body_fields``
        the body's metadata mapping (vLLM's ``vllm_xargs``, SGLang's ``custom_params``;
        keys ``tenant``, ``slo_ttft_ms``, ``slo_tpot_ms``), named ``body_name`` in
        problems; ``body_priority`` the body's own priority field. Every value given is
        validated, used or not. The metadata is meaningful only when there are no problems.
        """
        problems: list[Problem] = []
        fields: Mapping[str, Any] = {}
        if isinstance(body_fields, Mapping):
            fields = body_fields
        elif body_fields is not None:
            problems.append(Problem(body_name, "must be a JSON object"))
        tenant = None
        if header_tenant not in (None, ""):
            issue = _tenant_problem(header_tenant, self.max_tenant_len)
            if issue is None:
                tenant = header_tenant
            else:
                problems.append(Problem(f"header {self.tenant_header}", issue))
        claimed = fields.get("tenant")
        if claimed not in (None, ""):
            issue = _tenant_problem(claimed, self.max_tenant_len)
            if issue is not None:
                problems.append(Problem(f"{body_name}.tenant", issue))
            elif tenant is None and self.tenant_from_body:
                tenant = claimed
        priority, issue = _priority(body_priority)
        if issue is not None:
            problems.append(Problem("priority", issue))
        slos: dict[str, float | None] = {}
        for key in SLO_KEYS:
            value, issue = _slo(fields.get(key))
            if issue is not None:
                problems.append(Problem(f"{body_name}.{key}", issue))
            slos[key] = value if self.slo_from_body else None
        size = self._size_problem(fields) if fields else None
        if size is not None:
            problems.append(Problem(body_name, size))
        return (
            self._settle(
                tenant, priority if self.priority_from_body else None, slos, truncate=False
            ),
            problems,
        )

    def _size_problem(self, fields: Mapping[str, Any]) -> str | None:
        if len(fields) > self.max_metadata_keys:
            return (
                f"has {len(fields)} keys; at most {self.max_metadata_keys} are allowed"
                " (trust.max_metadata_keys)"
            )
        try:
            size = len(json.dumps(fields, allow_nan=True, default=str))
        except (TypeError, ValueError, RecursionError):
            return "is not a JSON object of plain values"
        if size > self.max_metadata_bytes:
            return (
                f"is {size} bytes as JSON; at most {self.max_metadata_bytes} are allowed"
                " (trust.max_metadata_bytes)"
            )
        return None

    # -- the scheduler's defence in depth ----------------------------------------------

    def bound(self, extra: object, priority: object, *, vouched: bool = True) -> RequestMetadata:
        """The metadata of a request as a scheduler receives it (``extra``: vLLM's
        ``extra_args``, SGLang's ``custom_params``; ``priority``: the engine's field),
        within this config's limits: an overlong tenant is truncated, an unknown one is
        ``default_tenant``, priority and SLO targets are clamped to their ranges, tiers
        and per-tenant SLO defaults apply, and invalid values count as absent.

        ``vouched``: the edge decided this metadata (its seal is valid, ``schedkit.seal``,
        or no edge key is set: offline use), so it is the operator's. Otherwise it is a
        client's claim, read as ``resolve`` reads a body with no header: the
        ``*_from_body`` switches apply and invalid values count as absent."""
        if not vouched:
            return self.resolve(None, extra if isinstance(extra, Mapping) else None, priority)[0]
        fields = extra if isinstance(extra, Mapping) else {}
        claimed = fields.get("tenant")
        tenant = None if claimed in (None, "") else str(claimed)
        if tenant is not None and not tenant.isprintable():
            tenant = None
        value, _ = _priority(priority)
        slos = {key: _slo(fields.get(key))[0] for key in SLO_KEYS}
        return self._settle(tenant, value, slos, truncate=True)

    def for_trace(
        self,
        tenant: str,
        priority: int,
        slo_ttft_ms: float | None,
        slo_tpot_ms: float | None,
    ) -> RequestMetadata:
        """A trace request's metadata as the simulator replays it: ``trace="trusted"``
        (default) is ``bound`` (the operator's data, within the limits), ``trace="body"``
        is ``resolve`` with the trace's values as a body's claims and no header."""
        fields = {"tenant": tenant, "slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms}
        if self.trace == "trusted":
            return self.bound(fields, priority)
        return self.resolve(None, fields, priority)[0]  # invalid values are left out

    def bound_priority(self, priority: object, tenant: str, *, vouched: bool = True) -> int:
        """``bound``'s priority alone (the engine's field may change after arrival)."""
        tier = self.tenant_priority.get(tenant)
        if tier is not None:
            return tier
        if not vouched and not self.priority_from_body:
            return 0
        value, _ = _priority(priority)
        lo, hi = self.priority_range
        return 0 if value is None else min(max(value, lo), hi)

    def _settle(
        self,
        tenant: str | None,
        priority: int | None,
        slos: Mapping[str, float | None],
        *,
        truncate: bool,
    ) -> RequestMetadata:
        if tenant is None:
            tenant = self.default_tenant
        elif truncate:
            tenant = tenant[: self.max_tenant_len]
        if self.tenants is not None and tenant not in self.tenants:
            tenant = self.default_tenant
        tier = self.tenant_priority.get(tenant)
        lo, hi = self.priority_range
        if tier is not None:
            priority = tier
        elif priority is not None:
            priority = min(max(priority, lo), hi)
        defaults = self.tenant_slo.get(tenant)
        ttft = _clamp(slos.get("slo_ttft_ms"), self.slo_ttft_ms_range)
        tpot = _clamp(slos.get("slo_tpot_ms"), self.slo_tpot_ms_range)
        if defaults is not None:
            ttft = ttft if ttft is not None else defaults.slo_ttft_ms
            tpot = tpot if tpot is not None else defaults.slo_tpot_ms
        return RequestMetadata(
            tenant=tenant, slo_ttft_ms=ttft, slo_tpot_ms=tpot, priority=priority or 0
        )


def _tenant_problem(value: object, max_len: int) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if len(value) > max_len:
        return f"is {len(value)} characters long; at most {max_len} are allowed"
    if not value.isprintable():
        return "must hold printable characters only"
    return None


def _priority(value: object) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"must be an integer, not {type(value).__name__}"
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return None, f"must be an integer, not {value!r}"
        value = int(value)
    return value, None


def _slo(value: object) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None, f"must be a number of milliseconds, not {type(value).__name__}"
    try:
        number = float(value)  # a numeric string counts, as vllm_xargs values often are
    except OverflowError:
        number = math.inf
    except ValueError:
        return None, f"must be a number of milliseconds, not {str(value)[:40]!r}"
    if not math.isfinite(number) or number <= 0:
        return None, f"must be a finite number of milliseconds > 0, not {value!r}"
    return number, None


def _clamp(value: float | None, bounds: tuple[float, float]) -> float | None:
    return None if value is None else min(max(value, bounds[0]), bounds[1])


DEFAULT_TRUST = TrustConfig()
