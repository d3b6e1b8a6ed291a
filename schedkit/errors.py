"""Errors schedkit raises on bad input. Each message names what was wrong and the fix."""

from __future__ import annotations

import difflib
import reprlib
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

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


# -- a policy's options, refused ---------------------------------------------------------


def options_error(policy: str, model: type[BaseModel], exc: ValidationError) -> PolicyConfigError:
    """What ``model`` refused in the options of ``policy``, in words: each problem names the
    option, the value given and what the option accepts (or, for an unknown option, the
    options there are and a close match), never the validation library's own wording."""
    problems = (_options_problem(policy, model, error) for error in exc.errors())
    return PolicyConfigError("; ".join(dict.fromkeys(problems)))


def _options_problem(policy: str, model: type[BaseModel], error: ErrorDetails) -> str:
    loc, kind = tuple(error["loc"]), error["type"]
    if kind == "extra_forbidden" and loc:
        return _unknown_option(policy, model, loc)
    path, annotation, constraints = _follow(model, loc)
    subject = f"policy {quote(policy)} option {path}" if loc else f"policy {quote(policy)} options"
    if kind in ("value_error", "assertion_error"):  # a validator's own words
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        given = f"{quote(error['input'])} is not accepted: " if loc else ""
        return f"{subject}: {given}{reason}"
    if annotation is None:  # a type not followed here: the library's words, less its prefix
        accepted = error["msg"].removeprefix("Input should be ")
    else:
        accepted = _accepted(annotation, constraints)
    if kind == "missing":
        return f"{subject} is required; it takes {accepted}"
    return f"{subject}: {quote(error['input'])} is not accepted; it takes {accepted}"


def _unknown_option(policy: str, model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    path, annotation, _ = _follow(model, loc[:-1])
    names = list(_fields(annotation)) if _is_model(annotation) else []
    if len(loc) == 1:
        head, known = f"policy {quote(policy)} has no option", "its options"
        none = "it takes no options"
    else:
        head, known = f"policy {quote(policy)} option {path} has no field", "its fields"
        none = "it takes no fields"
    listed = f"{known}: {', '.join(names)}" if names else none
    return f"{head} {quote(loc[-1])}; {listed}{did_you_mean(loc[-1], names)}"


def _follow(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, Any, list[Any]]:
    """``loc`` dotted, with the type and constraints found there; the type is None where
    ``loc`` leads somewhere this does not follow (a union of several types)."""
    annotation: Any = model
    constraints: list[Any] = []
    for part in loc:
        annotation, _ = _annotated(_optional(annotation), [])
        origin, args = get_origin(annotation), get_args(annotation)
        if _is_model(annotation) and part in _fields(annotation):
            field = _fields(annotation)[part]
            annotation, constraints = field.annotation, list(field.metadata)
        elif _is_a(origin, Mapping) and len(args) == 2:
            annotation, constraints = args[1], []
        elif _is_a(origin, Sequence) and isinstance(part, int):
            annotation, constraints = (args[0] if args else None), []
        else:
            annotation, constraints = None, []
    return ".".join(map(str, loc)), annotation, constraints


def _accepted(annotation: Any, constraints: list[Any]) -> str:
    """What a value of ``annotation`` may be, in words: ``a number >= 0 and <= 1000``."""
    annotation, constraints = _annotated(annotation, constraints)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(map(quote, args))
    if origin in (Union, types.UnionType):
        return ", or ".join(_accepted(arm, constraints) for arm in args)
    if annotation is None or annotation is types.NoneType:
        return "null"
    if _is_model(annotation):
        return f"an object with the fields {', '.join(_fields(annotation))}"
    if _is_a(origin, Mapping) and len(args) == 2:
        return f"an object mapping names to {_accepted(args[1], [])}"
    if _is_a(origin, Sequence) and args:
        return f"a list of {_accepted(args[0], [])}"
    words = _TYPE_WORDS.get(annotation) or f"a {getattr(annotation, '__name__', annotation)}"
    bounds = [
        f"{word} {_number(getattr(item, attr))}"
        for item in constraints
        for attr, word in _BOUND_WORDS
        if getattr(item, attr, None) is not None
    ]
    return " ".join([words, " and ".join(bounds)]) if bounds else words


_TYPE_WORDS: dict[Any, str] = {
    bool: "true or false", int: "an integer", float: "a number", str: "a string",
}  # fmt: skip
_BOUND_WORDS = (
    ("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"),
    ("min_length", "of length >="), ("max_length", "of length <="),
)  # fmt: skip


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # 1e7 reads 10000000, as one would type it
    return str(value)


def _annotated(annotation: Any, constraints: list[Any]) -> tuple[Any, list[Any]]:
    """``Annotated[T, Field(gt=0)]`` as ``T`` with its constraints added."""
    if get_origin(annotation) is not Annotated:
        return annotation, constraints
    base, *extras = get_args(annotation)
    added = [c for extra in extras for c in getattr(extra, "metadata", [extra])]
    return base, [*constraints, *added]


def _optional(annotation: Any) -> Any:
    """``T | None`` as ``T``; other types as they are."""
    if get_origin(annotation) in (Union, types.UnionType):
        arms = [arm for arm in get_args(annotation) if arm is not types.NoneType]
        if len(arms) == 1:
            return arms[0]
    return annotation


def _is_a(cls: Any, base: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, base)


def _is_model(annotation: Any) -> bool:
    return _is_a(annotation, BaseModel)


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by the names its input uses (an alias where it has one)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}
