"""Reading the files users hand schedkit: bounded, decoded and parsed, failing with a message.

Config, profile, cost-profile and workload-spec files are documents: read whole (at most
``MAX_DOCUMENT_BYTES``) by :func:`read_document` and parsed by :func:`parse_document`.
Trace files are read a line at a time by :func:`read_lines`, each line at most
``MAX_LINE_BYTES``, so a file that is no trace (one 1 GiB line) fails after its first MiB
instead of minutes later. Binary data, nesting deeper than the parsers recurse and
integers too long to convert become errors naming the file and the fix, never tracebacks.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal, Protocol

from schedkit.errors import SchedkitError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "ByteLines",
    "NestingError",
    "decode_text",
    "parse_document",
    "read_document",
    "read_lines",
]

MAX_DOCUMENT_BYTES = 16 << 20  # a config or spec file; real ones are a few KiB
MAX_LINE_BYTES = 1 << 20  # one trace line is one request: a few hundred bytes, or KiB of hash ids


class ByteLines(Protocol):
    """A binary file read by lines: an open file, a ``GzipFile``, a ``BytesIO``."""

    def readline(self, size: int = -1, /) -> bytes: ...


class NestingError(ValueError):
    """JSON or TOML nested deeper than Python's parsers can recurse."""


def parse_document(text: str, fmt: Literal["json", "toml"]) -> Any:
    """``text`` parsed as JSON or TOML.

    Raises ``ValueError``: ``json.JSONDecodeError`` / ``tomllib.TOMLDecodeError`` for bad
    syntax, :class:`NestingError` for nesting too deep to parse, and a plain ``ValueError``
    for an integer longer than Python converts (4,300 digits).
    """
    try:
        return json.loads(text) if fmt == "json" else tomllib.loads(text)
    except RecursionError:
        raise NestingError(
            "it is nested deeper than the parser can follow (thousands of levels of [ or {);"
            " no schedkit file nests more than a few levels"
        ) from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError):
        raise
    except ValueError as exc:  # int(): "Exceeds the limit (4300 digits) ..."
        if "digits" not in str(exc):
            raise
        raise ValueError(
            f"it holds an integer of more than {sys.get_int_max_str_digits():,} digits, far"
            " more than any count or time needs"
        ) from None


def decode_text(data: bytes, where: str, expected: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark dropped); an error naming ``where`` and
    the first byte that is not UTF-8 when it is binary."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SchedkitError(
            f"{where} is not UTF-8 text (byte {exc.start:,} is 0x{data[exc.start]:02x}), so it"
            f" looks like a binary file; pass {expected}"
        ) from None


def read_document(path: Path, what: str, expected: str) -> str:
    """The text of the document ``path`` (``what`` names it in errors: "config file").

    Raises :class:`SchedkitError` when it cannot be read, is larger than
    ``MAX_DOCUMENT_BYTES`` or is not UTF-8; ``expected`` says what was wanted instead.
    """
    try:
        with path.open("rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise SchedkitError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise SchedkitError(
            f"{what} {path} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB, far more than any"
            f" such file needs; pass {expected}"
        )
    return decode_text(data, f"{what} {path}", expected)


def read_lines(stream: ByteLines, where: str, limit: int = MAX_LINE_BYTES) -> bytes:
    """Everything ``stream`` holds, read a line at a time; a :class:`SchedkitError` naming
    ``where`` and the line as soon as one is longer than ``limit`` bytes."""
    lines: list[bytes] = []
    while line := stream.readline(limit + 1):
        if len(line) > limit and not (len(line) == limit + 1 and line.endswith(b"\n")):
            raise SchedkitError(
                f"{where}: line {len(lines) + 1:,} is longer than {limit:,} bytes; a trace"
                " line holds one request (a few hundred bytes). Check that this is a trace"
                " file, with one request per line"
            )
        lines.append(line)
    return b"".join(lines)
