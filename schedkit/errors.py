"""Errors schedkit raises on bad input. Each message names what was wrong and the fix."""

from __future__ import annotations

import reprlib

#: Characters of an offending value an error message quotes; the rest is counted, not shown.
QUOTE_LIMIT = 100

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 40, 40, 40
for _attr in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset", "maxdeque"):
    setattr(_SHORT, _attr, 6)


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, at most about ``limit`` characters.

    A longer string shows its first ``limit`` characters and its length; a container its
    first items; an integer too long to print its size. Quoting a 1 GiB trace cell costs
    no more than quoting a short one, and the message stays one readable paragraph.
    """
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}... ({len(value):,} {unit})"
    if isinstance(value, int) and value.bit_length() > 4000:  # repr refuses > 4,300 digits
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    try:
        text = _SHORT.repr(value)
    except ValueError:  # such an integer inside a container
        return f"a {type(value).__name__} holding an integer too long to print"
    return text if len(text) <= limit else text[:limit] + "..."


class SchedkitError(Exception):
    """Base class for schedkit's user-facing errors."""


class UnknownPolicyError(SchedkitError, KeyError):
    def __init__(self, name: str, installed: list[str]) -> None:
        self.name = name
        self.installed = installed
        super().__init__(
            f"unknown policy {quote(name)}; installed policies: {', '.join(installed) or '(none)'}."
            " Install the distribution that provides it, or pick one of these."
        )

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicatePolicyError(SchedkitError):
    """Two distributions register the same policy name."""


class PluginLoadError(SchedkitError):
    """A policy's entry point could not be imported or is not a policy."""


class PolicyConfigError(SchedkitError):
    """A schedkit config or a policy's options are invalid."""


class PolicyDecisionError(SchedkitError):
    """A policy returned an invalid decision (raised only in strict mode)."""
