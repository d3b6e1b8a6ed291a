"""Trace files, streamed: what every format's parser reads them with.

The formats are in :mod:`schedkit.workload.formats` (one module each), picked by
:func:`schedkit.workload.load_workload` from the file's suffix and first line. A trace is streamed,
never read whole: in blocks of whole lines, each line at most ``MAX_LINE_BYTES`` and UTF-8,
parsed row by row, and only up to ``max_requests`` rows when the workload is truncated, so
memory grows with the requests kept, not with the file. A problem with one line raises
``SchedkitError`` naming the origin, the line number and what is wrong, quoting at most ~100
characters of it.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import MAX_LINE_BYTES, parse_document
from schedkit.workload.limits import MAX_TOKENS, max_requests

__all__ = [
    "Readable",
    "RowError",
    "TraceSource",
    "count",
    "json_row",
    "number",
    "rows_to_read",
    "token_count",
    "trace_blocks",
    "trace_lines",
]


class RowError(ValueError):
    """A problem with one row of a trace file; the parser adds the file and line number."""


class Readable(Protocol):
    """A binary stream: an open file, a ``GzipFile``, a ``BytesIO``."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class TraceSource:
    """A trace file, opened afresh by each reader (one that declines leaves it unread)."""

    origin: str  # names the file in messages: its path, or "bundled file <name>"
    opener: Callable[[], AbstractContextManager[Readable]]  # the bytes, gunzipped
    size: int = 0  # bytes on disk (compressed size for .gz); picks the reader


# --- reading -----------------------------------------------------------------------------------


def trace_blocks(source: TraceSource, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The file's bytes in blocks of whole lines (about ``limit`` bytes each), each block
    UTF-8; a :class:`SchedkitError` naming the line as soon as one is longer than ``limit``
    bytes (a 1 GiB line fails after its first MiB), or naming the first byte not UTF-8."""
    return (block for block, _ in _checked_blocks(source, limit))


def trace_lines(
    source: TraceSource, before_block: Callable[[int], None] | None = None
) -> Iterator[str]:
    """The lines of the file, checked as by :func:`trace_blocks`, line breaks kept and
    untranslated (as ``csv`` wants them), a leading byte-order mark dropped.
    ``before_block`` is called with each block's size before its lines are read."""

    def texts() -> Iterator[io.StringIO]:
        for block, text in _checked_blocks(source, MAX_LINE_BYTES):
            if before_block is not None:
                before_block(len(block))
            yield io.StringIO(text, newline="")

    return itertools.chain.from_iterable(texts())


def _checked_blocks(source: TraceSource, limit: int) -> Iterator[tuple[bytes, str]]:
    where = source.origin
    try:
        with source.opener() as stream:
            yield from _blocks(stream, where, limit)
    except (OSError, EOFError, zlib.error) as exc:
        raise SchedkitError(f"cannot read workload file {where} (gzip, UTF-8 text): {exc}") from exc


def _blocks(stream: Readable, where: str, limit: int) -> Iterator[tuple[bytes, str]]:
    rest, line, offset = b"", 1, 0  # rest: the start of line number `line`, at byte `offset`
    while True:
        data = stream.read(limit)
        end = data.rfind(b"\n") + 1
        if data and not end:
            rest += data
        # The line under way, without its line break: rest, then data up to its first break.
        if len(rest) + (data.find(b"\n") if end else 0) > limit:
            raise SchedkitError(
                f"{where}: line {line:,} is longer than {limit:,} bytes; a trace line holds"
                " one request (a few hundred bytes). Check that this is a trace file, with"
                " one request per line"
            )
        if data and not end:
            continue
        block, rest = (rest + data[:end], data[end:]) if data else (rest, b"")
        if not block:
            return
        try:
            text = block.decode()
        except UnicodeDecodeError as exc:
            raise SchedkitError(
                f"workload file {where} is not UTF-8 text (byte {offset + exc.start:,} is"
                f" 0x{block[exc.start]:02x}), so it looks like a binary file; pass a trace in"
                " CSV or JSONL text"
            ) from None
        yield block, text.removeprefix("\ufeff") if not offset else text
        line, offset = line + block.count(b"\n"), offset + len(block)


def rows_to_read(max_rows: int | None) -> int:
    """Rows to read: ``max_rows``, or one past the request limit (then the rest is counted)."""
    limit = max_requests()
    return max_rows if max_rows is not None and max_rows <= limit else limit + 1


# --- value checks ------------------------------------------------------------------------------


def count(value: object, field: str) -> int:
    """A non-negative integer field; ``RowError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(f"{field} must be a non-negative integer, got {quote(value)}")
    return value


def token_count(value: object, field: str) -> int:
    tokens = count(value, field)
    if tokens > MAX_TOKENS:
        raise RowError(
            f"{field} {quote(tokens)} is more than {MAX_TOKENS:,} tokens, longer than any model's"
            " context; check the column"
        )
    return tokens


def number(value: object, field: str, *, positive: bool = False) -> float:
    """A finite number field, >= 0 (> 0 when ``positive``); ``RowError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RowError(f"{field} must be a finite number, got {quote(value)}")
    if value < 0 or (positive and value == 0):
        raise RowError(f"{field} must be {'> 0' if positive else '>= 0'}, got {quote(value)}")
    return float(value)


def json_row(line: str) -> dict[str, object]:
    """One JSONL line as an object; ``RowError`` saying what it is instead."""
    try:
        obj = parse_document(line, "json")
    except json.JSONDecodeError as exc:
        raise RowError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    except ValueError as exc:  # NestingError, or an integer of over 4,300 digits
        raise RowError(f"not a request: {exc}") from None
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {type(obj).__name__}")
    return obj
