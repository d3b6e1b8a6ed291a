"""A validation error in the user's words: the option, the value given and what it
accepts, with a close match for a misspelt name, never the validation library's own
wording. One mechanism for every input a model checks: the command line's flags, an
``--arm``'s keys, a config file's keys and a policy's options.

Each problem reads ``SUBJECT: VALUE is not accepted; it takes WHAT`` (``--max-num-seqs: 0
is not accepted; it takes an integer greater than 0``), ``SUBJECT is required; it takes
WHAT``, or ``unknown NOUN 'x'; valid NOUNs: a, b (did you mean 'a'?)``. What a value may be
is read from the model's type at the error's location (its bounds, choices, element
types; ``None`` aside), or where that cannot be followed from the error's kind and
context. A validator's own message is kept, after the subject and the value.
"""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core.core_schema import ErrorType

from schedkit.errors import PolicyConfigError, did_you_mean, quote

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["Namer", "accepted", "options_error", "problem", "problems", "unknown"]

Location = tuple[int | str, ...]
#: What the user calls the input at a location: ``--max-num-seqs``, ``policy 'sjf' option
#: aging_rate``, ``options.sjf``; for ``()``, the input as a whole (``""``: unnamed).
Namer = Callable[[Location], str]

# -- the problems of one error ----------------------------------------------------------


def problems(exc: ValidationError, model: type[BaseModel], name: Namer, noun: str = "key") -> str:
    """``exc``'s errors for ``model``, one clause each (each said once), joined by ``; ``;
    ``noun`` is what a top-level name of ``model`` is called (``key``, ``option``)."""
    return "; ".join(dict.fromkeys(problem(error, model, name, noun) for error in exc.errors()))


def problem(
    error: Mapping[str, Any], model: type[BaseModel], name: Namer, noun: str = "key"
) -> str:
    """One error of ``model`` in words: ``--max-num-seqs: 0 is not accepted; it takes an
    integer greater than 0``; ``unknown key 'polcy'; valid keys: policy, options (did you
    mean 'policy'?)``."""
    loc, kind = tuple(error["loc"]), error["type"]
    if kind == "extra_forbidden" and loc:
        return _unknown_here(model, loc, name, noun)
    depth, annotation, constraints = _follow(model, loc)
    loc = loc[:depth]
    if kind in ("value_error", "assertion_error") or kind not in _LIBRARY_KINDS:
        return _own_words(error, loc, name)
    if annotation is None:
        what, choices = _from_error(error)
    else:
        what, choices = accepted(annotation, constraints), _choices(annotation)
    if kind == "missing":
        return f"{name(loc)} is required; it takes {what}"
    given = error.get("input")
    hint = did_you_mean(given, choices)
    return f"{_lead(name(loc))}{quote(given)} is not accepted; it takes {what}{hint}"


def unknown(noun: str, word: object, choices: Iterable[str], within: str = "") -> str:
    """``unknown key 'polcy'; valid keys: policy, options (did you mean 'policy'?)``; a name
    ``within`` another is given whole: ``unknown field 'trust.tenant_form_body'; valid
    fields of trust: ...``."""
    names = list(choices)
    path = f"{within}.{word}" if within else word
    if names:
        listed = f"valid {noun}s{f' of {within}' if within else ''}: {', '.join(names)}"
    else:
        listed = f"{within or 'it'} takes no {noun}s"
    return f"unknown {noun} {quote(path)}; {listed}{did_you_mean(word, names)}"


def options_error(policy: str, model: type[BaseModel], exc: ValidationError) -> PolicyConfigError:
    """What ``model`` refused in the options of ``policy``: ``policy 'sjf' option
    aging_rate: -1 is not accepted; it takes a number from 0 to 10000000``."""

    def name(loc: Location) -> str:
        head = f"policy {quote(policy)}"
        return f"{head} option {'.'.join(map(str, loc))}" if loc else head

    return PolicyConfigError(problems(exc, model, name, noun="option"))


def _lead(subject: str) -> str:
    return f"{subject}: " if subject else ""


def _unknown_here(model: type[BaseModel], loc: Location, name: Namer, noun: str) -> str:
    """An unknown name, whole (``trust.tenant_form_body``), after the name of the input
    as a whole; a name inside an option or key is a field."""
    _, annotation, _ = _follow(model, loc[:-1])
    annotation = _bare(annotation)
    names = list(_fields(annotation)) if _is_model(annotation) else []
    within = ".".join(map(str, loc[:-1]))
    said = unknown(noun if len(loc) == 1 else "field", loc[-1], names, within)
    return f"{_lead(name(()))}{said}"


def _own_words(error: Mapping[str, Any], loc: Location, name: Namer) -> str:
    """A validator's message, after the subject and the value (once: a message that
    starts with its field's name is not given the name again)."""
    ctx = error.get("ctx") or {}
    reason = str(ctx.get("error", error["msg"])).removeprefix("Value error, ")
    subject = name(loc)
    if not loc:
        return f"{_lead(subject)}{reason}"
    if subject and reason.startswith(subject):
        return reason
    if isinstance(loc[-1], str) and reason.startswith(loc[-1]):
        return f"{_lead(name(loc[:-1]))}{reason}"
    return f"{_lead(subject)}{quote(error.get('input'))} is not accepted; {reason}"


_LIBRARY_KINDS = frozenset(get_args(ErrorType))  # a custom error's kind is its own words

# -- what a value may be ------------------------------------------------------------------


def accepted(annotation: Any, constraints: Sequence[Any] = ()) -> str:
    """What a value of ``annotation`` may be, in words: ``an integer from 1 to 1000``,
    ``'fast' or 'fair'``, ``a list of strings``; ``None`` is left out of a union (an
    optional value is given or left out)."""
    annotation, constraints = _annotated(annotation, list(constraints))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return _either([quote(arg) for arg in args])
    if _is_a(annotation, enum.Enum):
        return _either([quote(member.value) for member in annotation])
    if origin in (Union, types.UnionType):
        arms = [arm for arm in args if arm is not types.NoneType] or [types.NoneType]
        return _either([accepted(arm, constraints) for arm in arms])
    if annotation is None or annotation is types.NoneType:
        return "null"
    if annotation is Any:
        return "any value"
    if _is_model(annotation):
        names = list(_fields(annotation))
        return f"an object with the fields {', '.join(names)}" if names else "an empty object"
    if _is_a(origin, Mapping) and len(args) == 2:
        if args[1] is Any:
            return _limited("an object", constraints, "item")
        to = _word(_PLURALS, args[1]) or accepted(args[1])
        return _limited(f"an object mapping names to {to}", constraints, "item")
    if _is_a(origin, Sequence) and args and not _is_a(origin, str):
        return _limited(_list_of(args[0]), constraints, "item")
    words = _word(_TYPE_WORDS, annotation) or f"a {getattr(annotation, '__name__', annotation)}"
    return _limited(words, constraints, "character" if annotation is str else "item")


def _list_of(item: Any) -> str:
    plural = _word(_PLURALS, item)
    return f"a list of {plural}" if plural else f"a list, each item {accepted(item)}"


def _word(words: Mapping[type, str], annotation: Any) -> str | None:
    """``words`` for a plain type (a generic alias may not hash)."""
    return words.get(annotation) if isinstance(annotation, type) else None


def _either(words: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``; ``a, or b`` where an alternative has its own
    ``or``."""
    if len(words) < 2:
        return "".join(words)
    if any(" or " in word for word in words):
        return ", or ".join(words)
    return f"{', '.join(words[:-1])} or {words[-1]}"


def _choices(annotation: Any) -> list[str]:
    """The names a value of ``annotation`` may be, for a close match: its literals and
    enumeration values, in a union too."""
    annotation, _ = _annotated(annotation, [])
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return [arg for arg in args if isinstance(arg, str)]
    if _is_a(annotation, enum.Enum):
        return [m.value for m in annotation if isinstance(m.value, str)]
    if origin in (Union, types.UnionType):
        return [choice for arm in args for choice in _choices(arm)]
    return []


_TYPE_WORDS: dict[type, str] = {
    bool: "true or false", int: "an integer", float: "a number", str: "a string",
    dict: "an object", list: "a list",
}  # fmt: skip
_PLURALS: dict[type, str] = {
    bool: "true or false values", int: "integers", float: "numbers", str: "strings",
}  # fmt: skip
_BOUNDS = ("gt", "ge", "lt", "le", "min_length", "max_length", "multiple_of")


def _limited(words: str, constraints: Iterable[Any], unit: str) -> str:
    """``words`` with the bounds among ``constraints``: ``an integer from 1 to 1000``."""
    found: dict[str, Any] = {}
    for item in constraints:
        for attr in _BOUNDS:
            if getattr(item, attr, None) is not None:
                found[attr] = getattr(item, attr)
    return _with_bounds(words, found, unit)


def _with_bounds(words: str, bounds: Mapping[str, Any], unit: str) -> str:
    """``words`` with ``bounds`` (``gt``, ``ge``, ``lt``, ``le``, ``min_length``,
    ``max_length``, ``multiple_of``) in words; ``unit`` counts a length."""
    at = {key: _number(value) for key, value in bounds.items() if key in _BOUNDS}
    if "ge" in at and "le" in at:
        limits = [f"from {at['ge']} to {at['le']}"]
    else:
        limits = [f"{phrase} {at[key]}" for key, phrase in _PHRASES if key in at]
    if limits:  # an integer greater than 0; an integer of at least 1
        words += (" of " if limits[0].startswith("at ") else " ") + " and ".join(limits)
    low, high = at.get("min_length"), at.get("max_length")
    if low is not None and high is not None:
        words += f" with {low} to {high} {unit}s"
    elif low is not None or high is not None:
        count = low if low is not None else high
        most = "at least" if low is not None else "at most"
        words += f" with {most} {count} {unit}{'' if count == '1' else 's'}"
    if "multiple_of" in at:
        words += f", a multiple of {at['multiple_of']}"
    return words


_PHRASES = (("gt", "greater than"), ("ge", "at least"), ("lt", "less than"), ("le", "at most"))


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # 1e7 reads 10000000, as one would type it
    return str(value)


# -- what a value may be, where the model's type is not followed ------------------------

_KIND_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "dict_type": "an object", "model_type": "an object",
    "model_attributes_type": "an object", "list_type": "a list", "tuple_type": "a list",
    "greater_than": "a number", "greater_than_equal": "a number", "less_than": "a number",
    "less_than_equal": "a number", "multiple_of": "a number", "missing": "a value",
}  # fmt: skip


def _from_error(error: Mapping[str, Any]) -> tuple[str, list[str]]:
    """What a value may be from the error's kind and context alone, and the names it may
    be: ``a number greater than 0``; ``'auto' or 'fp8'``."""
    kind, ctx = error["type"], dict(error.get("ctx") or {})
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", ""))
        names = re.findall(r"'([^']*)'", expected)
        return (_either([quote(n) for n in names]) if names else expected), names
    if kind in _KIND_WORDS:
        return _with_bounds(_KIND_WORDS[kind], ctx, "item"), []
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        unit = "character" if kind.startswith("string") else "item"
        return _with_bounds("a string" if unit == "character" else "a value", ctx, unit), []
    return str(error["msg"]).removeprefix("Input should be "), []


# -- following a location through a model's types ---------------------------------------


def _follow(model: type[BaseModel], loc: Location) -> tuple[int, Any, list[Any]]:
    """How much of ``loc`` names an input of ``model``, with the type and constraints found
    there: a union stops the walk (the rest of ``loc`` names its arm); the type is None
    where ``loc`` leads where this does not follow."""
    annotation: Any = model
    constraints: list[Any] = []
    for depth, part in enumerate(loc):
        annotation = _bare(annotation)
        origin, args = get_origin(annotation), get_args(annotation)
        if origin in (Union, types.UnionType):  # the rest of ``loc`` names an arm
            if len(loc) == depth + 1:  # the arm's tag: the value is the union's
                return depth, annotation, constraints
            return len(loc), None, []
        if _is_model(annotation) and part in _fields(annotation):
            field = _fields(annotation)[part]
            annotation, constraints = field.annotation, list(field.metadata)
        elif _is_a(origin, Mapping) and len(args) == 2:
            annotation, constraints = args[1], []
        elif _is_a(origin, Sequence) and isinstance(part, int):
            annotation, constraints = (args[0] if args else None), []
        else:
            return len(loc), None, []
    return len(loc), annotation, constraints


def _bare(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` or ``| None``."""
    annotation, _ = _annotated(annotation, [])
    return _annotated(_optional(annotation), [])[0]


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
