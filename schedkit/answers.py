"""What the facade accepts from a policy: each check returns the engine's own copy of a
valid answer, or raises ``Invalid`` with the problem; formatting that never raises.

Key hooks' keys are made *canonical*: a tuple ``(rank, value)`` where the rank orders the
kinds (numbers, strings, bytes, tuples), so any two canonical keys compare, whatever types
the policies chose, and no method of a policy's object runs when the engine sorts.
"""

from __future__ import annotations

import math
import operator
import re
import signal
import threading
from collections.abc import Sequence
from types import CodeType
from typing import Any

from schedkit.decisions import ADMIT, Admission, BatchBudget

MAX_SHOWN = 200  # characters of an exception or answer in a fault message


class Invalid(Exception):
    """An answer that fails validation; its message is the logged problem."""


# -- what a policy may raise and still not stop the engine --------------------------------


def stops_process(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a policy's code ran, must leave the facade: a
    ``KeyboardInterrupt`` on the main thread (it may be the user's Ctrl-C), or a
    ``KeyboardInterrupt`` or ``SystemExit`` raised by a Python signal handler (vLLM's engine
    core raises ``SystemExit`` on SIGTERM; swallowing it would block shutdown). Anything
    else is the policy's fault, ``sys.exit()`` in a hook included, and so is everything
    raised off the main thread, where no signal handler runs and no Ctrl-C lands."""
    if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return False
    if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        return True
    handlers = _signal_handler_code()
    tb = exc.__traceback__
    while tb is not None:  # a handler's frame is on the stack where it raised
        if tb.tb_frame.f_code in handlers:
            return True
        tb = tb.tb_next
    return False


def _signal_handler_code() -> set[CodeType]:
    """The code of every Python-level signal handler installed now (functions and bound
    methods; ``SIG_DFL``, ``SIG_IGN`` and C handlers have none)."""
    codes = set()
    for signum in signal.valid_signals():
        handler = signal.getsignal(signum)
        code = getattr(handler, "__code__", None)  # a bound method forwards it
        if isinstance(code, CodeType):
            codes.add(code)
    return codes


# -- formatting that cannot raise ---------------------------------------------------------

_type_name = type.__dict__["__name__"].__get__  # not the metaclass's, which may lie


def type_name(obj: object) -> str:
    """The name of ``obj``'s type; never raises."""
    try:
        return _truncate(str.__str__(_type_name(type(obj))))
    except BaseException as exc:
        if stops_process(exc):
            raise
        return "?"


def show(obj: object, *, prefer_str: bool = False) -> str:
    """``repr(obj)`` (or ``str`` first), falling back to the other, then to a placeholder;
    at most ``MAX_SHOWN`` characters. Never raises, whatever ``obj``'s methods do."""
    if type(obj) is int and obj.bit_length() > 600:  # str() refuses over 4,300 digits
        return f"<{obj.bit_length()}-bit int>"
    for fmt in (str, repr) if prefer_str else (repr, str):
        try:
            # str.__str__ makes an exact str of a str subclass whose methods may lie.
            return _truncate(str.__str__(fmt(obj)))
        except BaseException as exc:
            if stops_process(exc):
                raise
            continue
    return f"<unprintable {type_name(obj)}>"


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` (just the name when the message is empty); never raises."""
    text = show(exc, prefer_str=True)
    return f"{type_name(exc)}: {text}" if text else type_name(exc)


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


# -- validation: each check returns the engine's copy of a valid answer -------------------


class Pool:
    """The engine's items at call time, which an answer may name (by identity)."""

    __slots__ = ("_ids", "items")

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = tuple(items)
        self._ids: set[int] | None = None

    @property
    def ids(self) -> set[int]:
        if self._ids is None:  # built once per facade call, only when a policy answers
            self._ids = set(map(id, self.items))
        return self._ids

    def permutation(self, result: Any) -> list[Any]:
        items = _plain_list(result, "expected a list of the waiting requests")
        if len(items) != len(self.items):
            raise Invalid(
                f"returned {len(items)} requests for a waiting queue of {len(self.items)}"
            )
        if set(map(id, items)) != self.ids:
            raise Invalid(
                "did not return a permutation of the waiting queue (unknown or repeated request)"
            )
        return items

    def subset(self, result: Any, what: str, at_least: int) -> list[Any]:
        items = _plain_list(result, "expected a list or None")
        ids = set(map(id, items))
        if len(ids) != len(items):
            raise Invalid(f"named the same {what} twice")
        if not ids <= self.ids:
            raise Invalid(f"named something that is not a {what}")
        if len(items) < at_least:
            raise Invalid(f"returned {len(items)} items, at least {at_least} needed")
        return items


def _plain_list(result: Any, expected: str) -> list[Any]:
    """A new plain list of what ``result`` holds. A list subclass is read as the list it
    stores: none of its methods runs (``__iter__``, ``__len__``, ``__getitem__``...), so
    what is validated is what the engine gets. ``isinstance`` would trust ``__class__``."""
    if not issubclass(type(result), list):
        raise Invalid(f"returned {type_name(result)}, {expected}")
    return list.copy(result)


_CODE = re.compile(r"[a-z0-9_]{1,40}")  # Admission.code: a metric label, or nothing


def replica_index(result: Any, count: int) -> int:
    """A ``route_request`` answer: the index of one of ``count`` replicas (an int, or an
    exact integer such as numpy's; not a bool)."""
    kind = type(result)
    try:
        if issubclass(kind, bool):
            raise TypeError
        value = int.__index__(result) if issubclass(kind, int) else operator.index(result)
    except TypeError:
        raise Invalid(
            f"returned {type_name(result)}; return a replica's index (an int) or None"
        ) from None
    if not 0 <= value < count:
        raise Invalid(
            f"returned replica {value}, but the cluster has {count} (indices 0..{count - 1})"
        )
    return value


def admission(result: Any) -> Admission:
    if not issubclass(type(result), Admission):
        raise Invalid(f"returned {type_name(result)}, expected Admission or None")
    admitted, reason = result.admitted, result.reason  # each read once
    code = getattr(result, "code", "")
    if type(admitted) is not bool:
        raise Invalid(f"returned admitted={show(admitted)}; Admission.admitted must be a bool")
    text = str.__str__(reason) if issubclass(type(reason), str) else ""
    if admitted:
        return Admission(True, text) if text else ADMIT
    if not text:
        raise Invalid("rejected without a reason; use Admission.reject('why')")
    label = str.__str__(code) if issubclass(type(code), str) else ""
    return Admission(False, text, label if _CODE.fullmatch(label) else "")


def budget(result: Any, token_budget: int, max_running: int, prefill_chunk: int) -> BatchBudget:
    if not issubclass(type(result), BatchBudget):
        raise Invalid(f"returned {type_name(result)}, expected BatchBudget or None")
    tokens, running, chunk = result.token_budget, result.max_running, result.prefill_chunk
    if type(tokens) is not int or type(running) is not int or type(chunk) is not int:
        fields = zip(_BUDGET_FIELDS, (tokens, running, chunk), strict=True)
        name, value = next((n, v) for n, v in fields if type(v) is not int)
        raise Invalid(  # a bool, a float or an int subclass is not an int
            f"returned BatchBudget.{name}={show(value)} ({type_name(value)});"
            " BatchBudget fields must be ints"
        )
    if not 1 <= tokens <= token_budget:
        raise Invalid(f"token_budget {show(tokens)} outside 1..{token_budget}")
    if not 1 <= running <= max_running:
        raise Invalid(f"max_running {show(running)} outside 1..{max_running}")
    cap = prefill_chunk
    if chunk < 0 or (cap and not 1 <= chunk <= cap):
        raise Invalid(f"prefill_chunk {show(chunk)} outside {f'1..{cap}' if cap else '>= 0'}")
    return BatchBudget(tokens, running, chunk)


_BUDGET_FIELDS = ("token_budget", "max_running", "prefill_chunk")


# -- keys ---------------------------------------------------------------------------------

MAX_KEY_DEPTH = 8  # nested tuples
MAX_KEY_ITEMS = 64  # per tuple
UNKEYED = (1,)  # a policy's component for an item it did not key: after every key
_PLAIN = (int, float)  # exact types: their comparisons are the builtins'


def canonical_key(key: Any, depth: int = 0) -> tuple[Any, ...]:
    """``key`` as a canonical comparable tuple; raises ``Invalid`` for anything else. Only
    the base types' own methods run: an ``int`` or ``str`` subclass cannot lie about
    its value or its order."""
    kind = type(key)
    if kind is int or kind is bool:
        return (0, int(key))
    if kind is tuple and len(key) <= MAX_KEY_ITEMS and all(type(x) in _PLAIN for x in key):
        # the common key, a plain tuple of ints and floats, without recursion
        if any(x != x for x in key):
            raise Invalid("returned a NaN key; keys must compare (use a number, not NaN)")
        return (3, tuple([(0, x) for x in key]))
    if kind is float or issubclass(kind, float):
        value = float.__float__(key)
        if math.isnan(value):
            raise Invalid("returned a NaN key; keys must compare (use a number, not NaN)")
        return (0, value)
    if issubclass(kind, str):
        return (1, str.__str__(key))
    if issubclass(kind, bytes):
        return (2, bytes.__getitem__(key, slice(None)))
    if issubclass(kind, tuple):
        n = tuple.__len__(key)
        if depth >= MAX_KEY_DEPTH or n > MAX_KEY_ITEMS:
            raise Invalid(
                f"returned a key nested deeper than {MAX_KEY_DEPTH} or longer than"
                f" {MAX_KEY_ITEMS} items"
            )
        return (3, tuple(canonical_key(tuple.__getitem__(key, i), depth + 1) for i in range(n)))
    if issubclass(kind, int):
        return (0, int.__index__(key))
    try:
        return (0, operator.index(key))  # numpy integers and other exact integers
    except TypeError:
        pass
    raise Invalid(
        f"returned a key of type {type_name(key)}; a key is a number, a string, bytes or a"
        " tuple of those"
    )


_END = -1  # closes a tuple in a flat key: below every kind rank, so shorter sorts first


def flat_key(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """The facade's combined key (a part per policy: ``(0, canonical)`` or ``UNKEYED``)
    as one flat tuple that orders and compares equal exactly as ``parts`` does: ranks and
    values in order, each tuple closed by ``_END``. A value is only ever compared with a
    value of its own kind, since equal prefixes mean equal structure so far. Comparing
    flat tuples is one pass over numbers and strings, several times faster than over the
    nested ones (the simulator's eviction heaps compare keys often)."""
    out: list[Any] = []
    for part in parts:
        out.append(part[0])
        if len(part) > 1:
            key = part[1]
            if key[0] != 3:
                out += key
                continue
            out.append(3)  # a tuple: its plain items inline, without a call each
            for item in key[1]:
                if item[0] == 3:
                    _flatten(item, out)
                else:
                    out += item
            out.append(_END)
    return tuple(out)


def flat_plain(key: Any) -> list[Any] | None:
    """``flat_key(((0, canonical_key(key)),))`` for the common key, a tuple of at most
    ``MAX_KEY_ITEMS`` ints and floats without NaN, built in one pass; None for any other
    key (``canonical_key`` judges it)."""
    if type(key) is not tuple or len(key) > MAX_KEY_ITEMS:
        return None
    out: list[Any] = [0, 3]
    for x in key:
        if type(x) not in _PLAIN or x != x:
            return None
        out += (0, x)
    out.append(_END)
    return out


def _flatten(key: tuple[Any, ...], out: list[Any]) -> None:
    """Append canonical ``key`` (``(rank, value)``; rank 3: a tuple of canonical keys)."""
    rank = key[0]
    out.append(rank)
    if rank == 3:
        for item in key[1]:
            _flatten(item, out)
        out.append(_END)
    else:
        out.append(key[1])
