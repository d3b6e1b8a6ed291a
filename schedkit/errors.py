"""Errors schedkit raises on bad input. Each message names what was wrong and the fix:
:func:`quote` shows the value given, :func:`did_you_mean` the close matches to a misspelt
name (a validation error in words: :mod:`schedkit.validation`)."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable

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


_CLOSE, _NEARLY = 0.6, 0.1  # difflib's ratio of a close match; of one nearly the best


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choices close to ``word`` (case aside), or ``""``
    when none is. A long ``word`` is no typo of a name: it gets no suggestion, at no cost."""
    if not isinstance(word, str) or len(word) > QUOTE_LIMIT:
        return ""
    by_folded = {choice.casefold(): choice for choice in choices}
    folded = word.casefold()
    if folded in by_folded:  # alike but for case: that one
        close = [folded]
    else:  # the closest, and up to two others nearly as close
        scored = sorted(
            ((difflib.SequenceMatcher(None, folded, c).ratio(), c) for c in by_folded),
            key=lambda pair: -pair[0],
        )
        close = [c for ratio, c in scored[:3] if ratio >= max(_CLOSE, scored[0][0] - _NEARLY)]
    if not close:
        return ""
    *others, last = (quote(by_folded[match]) for match in close)
    return f" (did you mean {', '.join(others) + ' or ' if others else ''}{last}?)"


class SchedkitError(Exception):
    """Base class for schedkit's user-facing errors."""


class UnknownPolicyError(SchedkitError, KeyError):
    def __init__(self, name: str, installed: list[str]) -> None:
        self.name = name
        self.installed = installed
        super().__init__(
            f"unknown policy {quote(name)}{did_you_mean(name, installed)}; installed policies:"
            f" {', '.join(installed) or '(none)'}."
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
