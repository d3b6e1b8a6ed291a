"""How large a workload may be: at most 10,000,000 requests and 30 simulated days.

Without a cap a slip such as ``poisson:rate=1e6,n=100000000000`` or ``duration=1e9``
generates requests until memory runs out, minutes before anything reports it. The caps
are checked before a workload is generated (from ``n``, or rate x duration) or parsed
(from a trace's line count). Raise them for one run through the environment, read when
a workload is loaded (not at import): ``SCHEDKIT_MAX_REQUESTS=50000000`` or
``SCHEDKIT_MAX_DURATION_S=5184000``.
"""

from __future__ import annotations

import math
import os

from schedkit.errors import SchedkitError, quote

__all__ = [
    "DEFAULT_MAX_DURATION_S",
    "DEFAULT_MAX_REQUESTS",
    "MAX_DURATION_VAR",
    "MAX_REQUESTS_VAR",
    "MAX_TOKENS",
    "check_duration",
    "check_requests",
    "max_duration_s",
    "max_requests",
]

#: Tokens one request's prompt or output may have (no model's context is this long); fixed.
MAX_TOKENS = 100_000_000
MAX_REQUESTS_VAR = "SCHEDKIT_MAX_REQUESTS"
DEFAULT_MAX_REQUESTS = 10_000_000  # ~2 GB of requests; a simulated arm of them takes hours
MAX_DURATION_VAR = "SCHEDKIT_MAX_DURATION_S"
DEFAULT_MAX_DURATION_S = 30 * 86_400.0  # 30 days; the shipped traces span an hour


def _limit(var: str, default: float) -> float:
    text = os.environ.get(var)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise SchedkitError(
            f"{var}={quote(text)} is not a number > 0; set it to the limit you want"
            f" (default {default:,.0f}) or unset it"
        )
    return value


def max_requests() -> int:
    """The most requests a workload may hold: ``SCHEDKIT_MAX_REQUESTS``, default 10,000,000."""
    return int(_limit(MAX_REQUESTS_VAR, DEFAULT_MAX_REQUESTS))


def max_duration_s() -> float:
    """The longest synthetic workload in seconds: ``SCHEDKIT_MAX_DURATION_S``, default 30 days."""
    return _limit(MAX_DURATION_VAR, DEFAULT_MAX_DURATION_S)


def check_requests(count: float, what: str) -> None:
    """Raise :class:`SchedkitError` when ``count`` requests (``what`` would have them;
    an expected count may be fractional or infinite) exceed :func:`max_requests`."""
    limit = max_requests()
    if count <= limit:
        return
    raise SchedkitError(
        f"{what} would hold {_number(count)} requests, more than the limit of {limit:,}; use fewer"
        " (a smaller n, rate or duration, or a shorter trace), or raise the limit for this"
        f" run with the environment variable {MAX_REQUESTS_VAR}, e.g."
        f" {MAX_REQUESTS_VAR}={_suggest(count, limit)} schedkit bench ..."
    )


def check_duration(seconds: float, what: str) -> None:
    """Raise :class:`SchedkitError` when ``seconds`` exceed :func:`max_duration_s`."""
    limit = max_duration_s()
    if seconds <= limit:
        return
    raise SchedkitError(
        f"{what} lasts {_number(seconds)} s, longer than the limit of {limit:,.0f} s"
        f" ({limit / 86_400:,.4g} days); use a shorter duration, or raise the limit for this"
        f" run with the environment variable {MAX_DURATION_VAR}, e.g."
        f" {MAX_DURATION_VAR}={_suggest(seconds, limit)} schedkit bench ..."
    )


def _number(value: float) -> str:
    """``100,000,000,000``; ``1e+300`` where the digits would fill the message."""
    if not math.isfinite(value):
        return "infinitely many" if value > 0 else str(value)
    return f"{value:,.0f}" if value < 1e15 else f"{value:.3g}"


def _suggest(value: float, limit: float) -> str:
    """A round number at least ``value`` for the example; twice the limit when ``value``
    is absurd (the example should not be a command that runs out of memory)."""
    if not math.isfinite(value) or value > 1000 * limit:
        return f"{2 * limit:.0f}"
    return str(10 ** math.ceil(math.log10(max(value, 1.0))))
