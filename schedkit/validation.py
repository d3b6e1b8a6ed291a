"""A validation error in the user's words: the option, the value given and what it
accepts, without the validation library's own wording (the command line's flags, an
``--arm``'s keys)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from schedkit.errors import quote

__all__ = ["accepts", "problems"]

_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}
_KINDS = {
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "bool_parsing": "true or false",
    "finite_number": "a finite number",
}


def accepts(error: Any) -> str:
    """What a value must be, from a validation error's type and context: ``it must be
    greater than 0``, ``it must be one of auto, fp8 (did you mean fp8?)``."""
    kind, ctx = error["type"], error.get("ctx", {})
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"it must be {words} {ctx[key]}"
    if kind == "literal_error":
        names = re.findall(r"'([^']*)'", str(ctx["expected"])) or [str(ctx["expected"])]
        close = difflib.get_close_matches(str(error.get("input")), names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"it must be one of {str(ctx['expected']).replace(chr(39), '')}{hint}"
    if kind in _KINDS:
        return f"it must be {_KINDS[kind]}"
    return str(error["msg"]).removeprefix("Value error, ")


def problems(exc: ValidationError, flag: Callable[[tuple[int | str, ...]], str | None]) -> str:
    """``exc``'s errors, one clause each: ``--max-num-seqs 0: it must be greater than 0``;
    ``flag`` names the option of an error's location (None: the spec as a whole, whose
    message is its own)."""
    out = []
    for error in exc.errors():
        name = flag(tuple(error["loc"]))
        if name is None or error["type"] == "value_error":
            message = str(error["msg"]).removeprefix("Value error, ")
            out.append(f"{name}: {message}" if name else message)
        else:
            out.append(f"{name} {quote(error.get('input'))}: {accepts(error)}")
    return "; ".join(out)
