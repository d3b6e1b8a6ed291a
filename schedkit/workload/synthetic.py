"""Synthetic workloads: Poisson or bursty (Gamma) arrival streams, alone or as tenant mixes.

Inline specs, passed to :func:`schedkit.workload.loader.load_workload`::

    poisson:rate=R,n=N[,prompt=LEN][,output=LEN][,seed=K]
    gamma:rate=R,cv=C,n=N[,prompt=LEN][,output=LEN][,seed=K]

``rate`` is the mean arrival rate in requests/s. ``poisson`` draws exponential gaps; ``gamma``
draws Gamma gaps with coefficient of variation ``cv`` (1 is Poisson, larger is burstier).
``duration=S`` (seconds) may replace ``n``. ``LEN`` is ``1024`` (lognormal with mean 1024 and
sigma 0.8, about the spread of the Azure conversation trace), ``const:512`` (always 512) or
``lognormal:1024:1.2`` (mean and sigma). Draws are rounded and kept within 1 and 8x the mean.
Defaults: ``prompt=1024,output=128,seed=0``. Example: ``gamma:rate=5,cv=4,n=1000,output=const:64``.
``cv`` is from 0.01 to 10, a mean length at most 100,000,000 tokens, sigma at most 5; ``n``
may be written ``1e6``. Sizes are capped (10,000,000 requests, 30 days) by
:mod:`schedkit.workload.limits`, checked before a request is drawn.

Workload-spec files (``.toml``, or ``.json`` with the same structure) mix tenants::

    name = "two-tenant-flood"
    duration_s = 300          # or n = 1000: the first n requests of the merged stream
    seed = 0
    [[tenant]]
    name = "flood"
    rate = 20.0               # requests/s
    arrival = "poisson"       # or "gamma", with cv = 3.0
    priority = 0              # lower is more important
    prompt_mean = 1024        # prompt_sigma / output_sigma: lognormal sigma, 0 = constant
    output_mean = 128
    slo_class = "interactive" # optional; attaches slo_ttft_ms / slo_tpot_ms
    [slo_class.interactive]
    ttft_ms = 1000
    tpot_ms = 50

Each tenant's stream is drawn from its own ``random.Random``, seeded from the spec's seed (plus
``load_workload``'s ``seed``) and the tenant's index, then streams are merged by arrival (ties
in tenant order). The same spec and seed always give the same workload.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import parse_document
from schedkit.workload.limits import MAX_TOKENS, check_duration, check_requests, max_requests
from schedkit.workload.model import TraceRequest, Workload

_SIGMA = 0.8  # lognormal sigma of token lengths unless a spec says otherwise
_CAP = 8.0  # lengths are capped at this multiple of the mean: one draw cannot fill a KV cache
MAX_SIGMA = 5.0  # lognormal sigma; above it nearly every draw is 1 token or the cap
MIN_CV, MAX_CV = 0.01, 10.0  # gamma arrivals: nearly even gaps .. bursts no clock resolves


@dataclass(frozen=True, slots=True)
class _Lengths:
    """Token-length distribution: lognormal with this mean and sigma; sigma 0 = constant."""

    mean: float
    sigma: float

    def draw(self, rng: random.Random) -> int:
        if self.sigma == 0:
            return max(1, min(round(self.mean), MAX_TOKENS))
        mu = math.log(self.mean) - self.sigma**2 / 2  # makes the lognormal's mean self.mean
        draw = rng.lognormvariate(mu, self.sigma)
        return max(1, min(round(min(draw, _CAP * self.mean)), MAX_TOKENS))


def _stream(
    rng: random.Random,
    *,
    rate: float,
    cv: float | None,
    n: int | None,
    duration_s: float | None,
    prompt: _Lengths,
    output: _Lengths,
    what: str,
) -> list[tuple[float, int, int]]:
    """(arrival_s, prompt_tokens, output_tokens) until ``n`` requests or ``duration_s``;
    an error naming ``what`` past :func:`~schedkit.workload.limits.max_requests`."""
    shape = 1.0 / cv**2 if cv is not None else 0.0
    out: list[tuple[float, int, int]] = []
    t = 0.0
    cap = max_requests()  # rate x duration was checked; this bounds the draw's luck
    while n is None or len(out) < n:
        if len(out) >= cap:
            check_requests(len(out) + 1, what)
        # Gamma(shape k, scale 1/(rate k)) has mean 1/rate and coefficient of variation 1/sqrt(k).
        t += rng.gammavariate(shape, 1.0 / (rate * shape)) if cv else rng.expovariate(rate)
        if duration_s is not None and t >= duration_s:
            break
        out.append((t, prompt.draw(rng), output.draw(rng)))
    return out


# --- inline specs ------------------------------------------------------------------------------

_INLINE_KEYS = {"rate", "cv", "n", "duration", "prompt", "output", "seed"}


def _inline_error(spec: str, problem: str) -> SchedkitError:
    return SchedkitError(
        f"bad synthetic workload {quote(spec)}: {problem}. Syntax: 'poisson:rate=R,n=N[,prompt=LEN]"
        "[,output=LEN][,seed=K]' or 'gamma:rate=R,cv=C,n=N[,...]' (duration=S may replace n;"
        " LEN is 1024, const:512 or lognormal:1024:1.2)"
    )


def _parse_lengths(spec: str, key: str, value: str) -> _Lengths:
    kind, _, rest = value.partition(":")
    try:
        if not rest:
            lengths = _Lengths(float(value), _SIGMA)
        elif kind == "const":
            lengths = _Lengths(float(rest), 0.0)
        elif kind == "lognormal":
            mean, sigma = rest.split(":")
            lengths = _Lengths(float(mean), float(sigma))
        else:
            raise ValueError(value)
    except ValueError:
        raise _inline_error(spec, f"{key}={quote(value)} is not a length") from None
    if not (0 < lengths.mean <= MAX_TOKENS and 0 <= lengths.sigma <= MAX_SIGMA):
        raise _inline_error(
            spec,
            f"{key}={quote(value)} needs a mean > 0 and at most {MAX_TOKENS:,} tokens, and a"
            f" sigma from 0 to {MAX_SIGMA:g}",
        )
    return lengths


def _positive(spec: str, key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf:
        raise _inline_error(spec, f"{key}={quote(value)} must be a number > 0")
    return number


def _integer(spec: str, key: str, value: str, *, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        try:  # 1e6 spells an integer too
            as_float = float(value)
            number = int(as_float) if as_float.is_integer() else minimum - 1
        except (ValueError, OverflowError):
            number = minimum - 1
    if number < minimum:
        raise _inline_error(spec, f"{key}={quote(value)} must be an integer >= {minimum}")
    return number


def _check_size(what: str, n: int | None, duration_s: float | None, rate: float) -> None:
    """The limits of :mod:`schedkit.workload.limits`, before a single request is drawn."""
    if n is not None:
        check_requests(n, what)
    if duration_s is not None:
        check_duration(duration_s, what)
        check_requests(rate * duration_s, f"{what} (rate x duration)")


@functools.lru_cache(maxsize=32)
def inline_workload(spec: str, seed: int = 0) -> Workload:
    """The workload an inline ``poisson:...`` / ``gamma:...`` spec describes (cached)."""
    kind, _, body = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in ("poisson", "gamma"):
        raise _inline_error(spec, f"unknown arrival process {quote(kind)}; use poisson or gamma")
    params: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or key not in _INLINE_KEYS or key in params:
            problem = "repeated" if key in params else "unknown or missing '='"
            raise _inline_error(spec, f"{quote(item)} is {problem}; keys: {sorted(_INLINE_KEYS)}")
        params[key] = value
    if "rate" not in params or ("n" in params) == ("duration" in params):
        raise _inline_error(spec, "give rate, and exactly one of n and duration")
    if (kind == "gamma") != ("cv" in params):
        raise _inline_error(spec, "cv is required for gamma and not accepted for poisson")
    n = _integer(spec, "n", params["n"], minimum=1) if "n" in params else None
    duration = _positive(spec, "duration", params["duration"]) if "duration" in params else None
    cv = _positive(spec, "cv", params["cv"]) if "cv" in params else None
    if cv is not None and not MIN_CV <= cv <= MAX_CV:
        raise _inline_error(
            spec,
            f"cv={quote(params['cv'])} must be from {MIN_CV:g} (nearly even gaps) to"
            f" {MAX_CV:g} (very bursty); 1 is Poisson",
        )
    spec_seed = _integer(spec, "seed", params.get("seed", "0"), minimum=-(2**63))
    rate = _positive(spec, "rate", params["rate"])
    what = f"workload {quote(spec.strip())}"
    _check_size(what, n, duration, rate)
    rows = _stream(
        random.Random(spec_seed + seed),
        rate=rate,
        cv=cv,
        n=n,
        duration_s=duration,
        prompt=_parse_lengths(spec, "prompt", params.get("prompt", "1024")),
        output=_parse_lengths(spec, "output", params.get("output", "128")),
        what=what,
    )
    requests = tuple(TraceRequest(f"{kind}-{i:06d}", *row) for i, row in enumerate(rows))
    return Workload(
        spec.strip(), requests, 0, f"synthetic {spec.strip()} (seed {spec_seed + seed})"
    )


# --- workload-spec files -----------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


_M = TypeVar("_M", bound=BaseModel)


class SloClassSpec(_Model):
    """Latency targets attached to every request of the tenants in this class."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)


class TenantSpec(_Model):
    """One tenant's request stream."""

    name: str = Field(min_length=1)
    rate: float = Field(gt=0, description="mean arrival rate, requests/s")
    arrival: Literal["poisson", "gamma"] = "poisson"
    cv: float | None = Field(
        default=None, ge=MIN_CV, le=MAX_CV, description="gamma only: burstiness"
    )
    priority: int = 0
    prompt_mean: float = Field(default=1024, gt=0, le=MAX_TOKENS)
    prompt_sigma: float = Field(default=_SIGMA, ge=0, le=MAX_SIGMA)
    output_mean: float = Field(default=128, gt=0, le=MAX_TOKENS)
    output_sigma: float = Field(default=_SIGMA, ge=0, le=MAX_SIGMA)
    slo_class: str | None = None

    @model_validator(mode="after")
    def _cv_matches_arrival(self) -> TenantSpec:
        if self.arrival == "gamma" and self.cv is None:
            raise ValueError("arrival = 'gamma' needs cv (e.g. cv = 3.0; 1.0 is Poisson)")
        if self.arrival == "poisson" and self.cv is not None:
            raise ValueError("cv applies only to arrival = 'gamma'; remove it or switch")
        return self


class WorkloadSpec(_Model):
    """A multi-tenant workload: tenants' streams merged by arrival."""

    name: str = Field(min_length=1)
    description: str = ""
    source: str = ""
    duration_s: float | None = Field(default=None, gt=0)
    n: int | None = Field(default=None, gt=0)
    seed: int = 0
    tenant: list[TenantSpec] = Field(min_length=1)
    slo_class: dict[str, SloClassSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if (self.n is None) == (self.duration_s is None):
            raise ValueError("give exactly one of duration_s (seconds) and n (requests)")
        names = [t.name for t in self.tenant]
        if dupes := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"tenant names must be unique; repeated: {dupes}")
        for t in self.tenant:
            if t.slo_class is not None and t.slo_class not in self.slo_class:
                raise ValueError(
                    f"tenant {quote(t.name)} uses slo_class {quote(t.slo_class)}, which is not defined;"
                    f" defined classes: {sorted(self.slo_class) or 'none'}"
                    f" (add [slo_class.{t.slo_class}])"
                )
        return self


def _field_path(loc: tuple[int | str, ...], data: Any) -> str:
    """``("tenant", 1, "rate")`` -> ``tenant[1] ('quiet').rate``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            item = data[part] if isinstance(data, list) and part < len(data) else None
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                out += f" ({quote(item['name'])})"
            data = item
        else:
            out += f".{part}" if out else part
            data = data.get(part) if isinstance(data, dict) else None
    return out or "(top level)"


def parse_spec(text: str, *, origin: str, fmt: Literal["toml", "json"]) -> WorkloadSpec:
    """Parse and validate a workload spec; errors name ``origin`` and each bad field."""
    return validated(WorkloadSpec, text, origin, fmt, "workload spec", __name__)


def validated(
    model: type[_M], text: str, origin: str, fmt: Literal["toml", "json"], what: str, doc: str
) -> _M:
    """``text`` parsed and validated as ``model``; errors name ``origin``, each bad field,
    and the module ``doc`` whose docstring describes the format."""
    try:
        data: Any = parse_document(text, fmt)
    except ValueError as exc:
        raise SchedkitError(f"{origin}: not valid {fmt.upper()}: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SchedkitError(
            f"{origin}: invalid {what}:\n{field_problems(exc, data)}\nFix these fields;"
            f" the format is described in the {doc} module docstring."
        ) from None


def field_problems(exc: ValidationError, data: Any) -> str:
    """One line per invalid field of ``data``: its path, what is wrong, what was given."""
    problems = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        given = "" if err["type"] == "missing" else f" (got {quote(err['input'])})"
        if err["type"] == "value_error" or len(given) > 80:
            given = ""
        problems.append(f"  {_field_path(err['loc'], data)}: {msg}{given}")
    return "\n".join(problems)


def spec_workload(
    text: str, *, origin: str, fmt: Literal["toml", "json"], seed: int = 0
) -> Workload:
    """The workload a ``.toml``/``.json`` spec describes; ``seed`` is added to its seed."""
    spec = parse_spec(text, origin=origin, fmt=fmt)
    what = f"workload spec {origin}"
    _check_size(what, spec.n, spec.duration_s, sum(t.rate for t in spec.tenant))
    base = spec.seed + seed
    merged: list[TraceRequest] = []
    for index, tenant in enumerate(spec.tenant):
        slo = spec.slo_class[tenant.slo_class] if tenant.slo_class else SloClassSpec()
        # A string seed is hashed (sha512) by random.seed, so streams for (seed, index) pairs
        # are unrelated; seed + index would reuse tenant 1's stream as tenant 0's at seed + 1.
        rng = random.Random(f"schedkit-tenant:{base}:{index}")
        rows = _stream(
            rng,
            rate=tenant.rate,
            cv=tenant.cv,
            n=spec.n,
            duration_s=spec.duration_s,
            prompt=_Lengths(tenant.prompt_mean, tenant.prompt_sigma),
            output=_Lengths(tenant.output_mean, tenant.output_sigma),
            what=f"{what}, tenant {quote(tenant.name)}",
        )
        merged.extend(
            TraceRequest(
                f"{tenant.name}-{i:06d}",
                *row,
                tenant=tenant.name,
                priority=tenant.priority,
                slo_ttft_ms=slo.ttft_ms,
                slo_tpot_ms=slo.tpot_ms,
            )
            for i, row in enumerate(rows)
        )
    merged.sort(key=lambda r: r.arrival_s)  # stable: ties stay in tenant order
    if spec.n is not None:
        merged = merged[: spec.n]
    source = spec.source or f"workload spec {origin} (seed {base})"
    return Workload(spec.name, tuple(merged), 0, source)
