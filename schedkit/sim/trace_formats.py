"""Trace files, streamed: reading them, and the JSONL formats (Mooncake, schedkit's own).

The formats are described in :mod:`schedkit.sim.workloads`, whose ``load_workload`` picks the
parser by suffix; Azure CSVs are parsed in :mod:`schedkit.sim.azure_csv`. A trace is streamed,
never read whole: in blocks of whole lines, each line at most ``MAX_LINE_BYTES`` and UTF-8,
parsed row by row, and only up to ``max_requests`` rows when the workload is truncated, so
memory grows with the requests kept, not with the file. A problem with one line raises
``SchedkitError`` naming the origin, the line number and what is wrong, quoting at most ~100
characters of it.
"""

from __future__ import annotations

import dataclasses
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
from schedkit.sim.limits import MAX_TOKENS, check_requests, max_requests
from schedkit.sim.workloads import TraceRequest, Workload

__all__ = [
    "Readable",
    "RowError",
    "TraceSource",
    "parse_jsonl",
    "rows_to_read",
    "token_count",
    "trace_blocks",
    "trace_lines",
]

_MOONCAKE_KEYS = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
_SCHEDKIT_KEYS = frozenset(f.name for f in dataclasses.fields(TraceRequest))
_MOONCAKE_BLOCK_TOKENS = 512


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


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(f"{field} must be a non-negative integer, got {quote(value)}")
    return value


def token_count(value: object, field: str) -> int:
    count = _count(value, field)
    if count > MAX_TOKENS:
        raise RowError(
            f"{field} {quote(count)} is more than {MAX_TOKENS:,} tokens, longer than any model's"
            " context; check the column"
        )
    return count


def _number(value: object, field: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RowError(f"{field} must be a finite number, got {quote(value)}")
    if value < 0 or (positive and value == 0):
        raise RowError(f"{field} must be {'> 0' if positive else '>= 0'}, got {quote(value)}")
    return float(value)


# --- JSONL -------------------------------------------------------------------------------------


def _hash_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise RowError(f"hash_ids must be a list of integers, got {quote(value)}")
    return tuple(value)


def _check_keys(obj: dict[str, object], known: frozenset[str], required: tuple[str, ...]) -> None:
    if unknown := sorted(obj.keys() - known):
        raise RowError(
            f"unknown field(s) {quote(unknown)}; this format's fields are {sorted(known)}"
        )
    if missing := [key for key in required if key not in obj]:
        raise RowError(f"missing required field(s) {missing}")


def _mooncake_row(obj: dict[str, object], request_id: str) -> TraceRequest:
    _check_keys(obj, _MOONCAKE_KEYS, ("timestamp", "input_length", "output_length"))
    return TraceRequest(
        request_id,
        _number(obj["timestamp"], "timestamp") / 1000.0,
        token_count(obj["input_length"], "input_length"),
        token_count(obj["output_length"], "output_length"),
        hash_ids=_hash_ids(obj.get("hash_ids", [])),
    )


def _schedkit_row(obj: dict[str, object], default_id: str) -> TraceRequest:
    _check_keys(obj, _SCHEDKIT_KEYS, ("arrival_s", "prompt_tokens", "output_tokens"))
    request_id, tenant = obj.get("request_id", default_id), obj.get("tenant", "default")
    for field, value in (("request_id", request_id), ("tenant", tenant)):
        if not isinstance(value, str) or not value:
            raise RowError(f"{field} must be a non-empty string, got {quote(value)}")
    priority = obj.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise RowError(
            f"priority must be an integer (lower is more important), got {quote(priority)}"
        )
    ttft, tpot = obj.get("slo_ttft_ms"), obj.get("slo_tpot_ms")
    return TraceRequest(
        str(request_id),
        _number(obj["arrival_s"], "arrival_s"),
        token_count(obj["prompt_tokens"], "prompt_tokens"),
        token_count(obj["output_tokens"], "output_tokens"),
        tenant=str(tenant),
        priority=priority,
        slo_ttft_ms=None if ttft is None else _number(ttft, "slo_ttft_ms", positive=True),
        slo_tpot_ms=None if tpot is None else _number(tpot, "slo_tpot_ms", positive=True),
        hash_ids=_hash_ids(obj.get("hash_ids", [])),
    )


def _jsonl_header(obj: dict[str, object]) -> tuple[str, str, int]:
    meta = obj["workload"]
    if (
        len(obj) != 1
        or not isinstance(meta, dict)
        or not meta.keys() <= {"name", "source", "hash_block_tokens"}
    ):
        raise RowError(
            'the header line must be {"workload": {"name": ..., "source": ...,'
            f' "hash_block_tokens": ...}}}} with only those keys, got {quote(obj)}'
        )
    name, source = meta.get("name", ""), meta.get("source", "")
    if not isinstance(name, str) or not isinstance(source, str):
        raise RowError(f"workload name and source must be strings, got {quote(meta)}")
    return name, source, _count(meta.get("hash_block_tokens", 0), "hash_block_tokens")


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


def parse_jsonl(
    source: TraceSource, stem: str, attribution: str = "", max_rows: int | None = None
) -> Workload:
    """Mooncake or schedkit JSONL, told apart by the keys of the first request line; its
    first ``max_rows`` requests when given."""
    origin, stop = source.origin, rows_to_read(max_rows)
    fmt, name, block_tokens = "", stem, 0
    requests: list[TraceRequest] = []
    seen_ids: set[str] = set()
    lines = enumerate(trace_lines(source), start=1)
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            obj = json_row(line)
            if not fmt and "workload" in obj:
                header_name, header_source, block_tokens = _jsonl_header(obj)
                name, attribution = header_name or name, header_source or attribution
                fmt = "schedkit"
                continue
            if not fmt:
                fmt = "mooncake" if obj.keys() & {"timestamp", "input_length"} else "schedkit"
                block_tokens = _MOONCAKE_BLOCK_TOKENS if fmt == "mooncake" else 0
            default_id = f"{stem}-{len(requests):06d}"
            if fmt == "mooncake":
                requests.append(_mooncake_row(obj, default_id))
            else:
                request = _schedkit_row(obj, default_id)
                if request.request_id in seen_ids:
                    raise RowError(f"duplicate request_id {quote(request.request_id)}")
                if request.hash_ids and not block_tokens:
                    raise RowError(
                        'hash_ids need a block size: start the file with {"workload":'
                        ' {"hash_block_tokens": N}}'
                    )
                seen_ids.add(request.request_id)
                requests.append(request)
        except RowError as exc:
            raise SchedkitError(f"{origin}: line {lineno:,}: {exc}") from None
        if len(requests) >= stop:
            break
    if len(requests) > max_requests():
        count = len(requests) + sum(1 for _, line in lines if line.strip())
        check_requests(count if max_rows is None else min(count, max_rows), f"trace {origin}")
    if not requests:
        raise SchedkitError(f"{origin}: no requests; add one JSON object per line")
    if fmt == "mooncake" and (t0 := min(r.arrival_s for r in requests)) > 0:
        requests = [dataclasses.replace(r, arrival_s=r.arrival_s - t0) for r in requests]
    fmt_name = "Mooncake-format" if fmt == "mooncake" else "schedkit JSONL"
    return Workload(
        name, tuple(requests), block_tokens, attribution or f"{fmt_name} trace {origin}"
    )
