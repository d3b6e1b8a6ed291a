"""The HTTP edge's JSON reader: a body is read only where every engine reads it alike.

The engines parse request bodies with different JSON readers: vLLM and LMDeploy with the
standard library through FastAPI (``json.loads`` on bytes, which detects UTF-8 with a
byte-order mark, UTF-16 and UTF-32, accepts ``NaN``/``Infinity``, integers of any size,
lone surrogates, and gives up near 1,000 levels of nesting), SGLang with orjson (UTF-8
only, no ``NaN``, integers within 64 bits, no lone surrogates, 1,024 levels). A body one
reader takes and another reads differently, or that the edge gives up on while the engine
does not, lets a client step around the edge (issue #35). ``read_body`` therefore accepts
only the subset they all read the same, and anything else is the client's error:

- UTF-8 without a byte-order mark (RFC 8259 §8.1); other encodings are refused;
- no ``NaN``/``Infinity`` literals, no number that overflows a float, no integer outside
  ``[-2**63, 2**64 - 1]`` (orjson's range);
- no duplicate key in an object (readers differ on which one wins);
- no lone surrogate in a string (``"\\ud800"``);
- at most ``max_depth`` levels of nesting.

The edge forwards ``dump_body`` of what it read (compact UTF-8), so the engine parses
exactly the value the edge decided on. The standard library does the reading (one pass in
C, with hooks only for objects and non-integer numbers); nothing here reimplements JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["BodyError", "dump_body", "read_body"]

INT_MIN, INT_MAX = -(2**63), 2**64 - 1
# Digits to "9", all else to " ": a run of 19 nines is a number that may leave orjson's
# range (a C-speed substring search; a regex tries every digit position).
_DIGIT_RUNS = bytes(0x39 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"9" * 19
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class BodyError(ValueError):
    """A body the edge refuses; the message says what is wrong and how to send it."""


def read_body(raw: bytes, max_depth: int) -> Any:
    """The JSON value of ``raw``, or ``BodyError`` when it is not in the subset every
    engine reads alike (see the module docstring)."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raise BodyError("the body starts with a byte-order mark; send UTF-8 JSON without one")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(
            f"the body is not UTF-8 (byte {exc.start}); send JSON encoded as UTF-8"
        ) from None
    if "\x00" in text:
        raise BodyError("the body holds NUL bytes (UTF-16 or UTF-32?); send UTF-8 JSON")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_float=_float,
            parse_constant=_constant,
        )
    except RecursionError:
        raise BodyError(f"the body is nested more than {max_depth} levels deep") from None
    except BodyError:
        raise
    except ValueError as exc:  # JSONDecodeError, or an integer too long for int()
        raise BodyError(f"the body is not valid JSON: {exc}") from None
    if raw.count(b"[") + raw.count(b"{") > max_depth and _depth(value) > max_depth:
        raise BodyError(f"the body is nested more than {max_depth} levels deep")
    if raw.translate(_DIGIT_RUNS).find(_LONG_NUMBER) >= 0:
        _check_ints(value)
    if _ESCAPED_SURROGATE.search(raw):
        _check_strings(value)
    return value


def dump_body(value: Any) -> bytes:
    """``value`` as the compact UTF-8 JSON the edge forwards."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BodyError(f"key {key[:80]!r} appears twice in one object; send it once")
            seen.add(key)
    return out


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise BodyError(f"the number {text[:40]} is out of range for a float")
    return number


def _constant(name: str) -> float:
    raise BodyError(f"{name} is not JSON; send a finite number or null")


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, (dict, list))]
    return [v for v in value if isinstance(v, (dict, list))]


def _depth(value: Any) -> int:
    """Levels of nesting of ``value`` (a scalar is 0), walking containers only."""
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level:
        depth += 1
        level = [child for item in level for child in _containers(item)]
    return depth


def _walk(value: Any) -> list[Any]:
    """Every scalar and key of ``value``, iteratively (nesting is bounded already)."""
    out: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            out.append(item)
    return out


def _check_ints(value: Any) -> None:
    for item in _walk(value):
        if type(item) is int and not INT_MIN <= item <= INT_MAX:
            raise BodyError(
                f"the integer {str(item)[:24]}... is outside [-2**63, 2**64 - 1]; send a"
                " smaller number or a string"
            )


def _check_strings(value: Any) -> None:
    for item in _walk(value):
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise BodyError(
                    f"a string holds a lone surrogate escape ({item[:40]!r}); send valid Unicode"
                ) from None
