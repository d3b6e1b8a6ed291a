"""Trace file formats: Azure CSV, Mooncake JSONL and schedkit JSONL, parsed into requests.

The formats are described in :mod:`schedkit.sim.workloads`, whose ``load_workload`` picks the
parser by suffix. A trace is streamed, never read whole: in blocks of whole lines, each line
at most ``MAX_LINE_BYTES`` and UTF-8, parsed row by row, and only up to ``max_requests`` rows
when the workload is truncated, so memory grows with the requests kept, not with the file.
A problem with one line raises ``SchedkitError`` naming the origin, the line number and what
is wrong, quoting at most ~100 characters of it.

Azure CSVs are read with the standard ``csv`` module (quoted cells holding commas, quotes
and line breaks; a byte-order mark; CRLF), or with pyarrow's streaming reader
(:mod:`schedkit.sim.trace_arrow`) when pyarrow is installed and the read is large enough
for it to be faster (measured in ``benchmarks/traces/reader.md``). The csv reader is the
reference: pyarrow reads only what the csv reader reads the same way, to the bit, and
declines anything unusual or wrong, which the csv reader then reads or reports.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import io
import itertools
import json
import math
import re
import zlib
from array import array
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import MAX_LINE_BYTES, parse_document
from schedkit.sim.limits import MAX_TOKENS, check_requests, max_requests
from schedkit.sim.workloads import TraceRequest, Workload

__all__ = [
    "AZURE_COLUMNS",
    "PYARROW_MIN_BYTES",
    "PYARROW_MIN_REQUESTS",
    "TIMESTAMP_PATTERN",
    "AzureRows",
    "Readable",
    "Reader",
    "TraceSource",
    "azure_header",
    "azure_requests",
    "parse_azure_csv",
    "parse_jsonl",
    "read_azure_header",
    "read_azure_rows",
    "trace_blocks",
]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: The Azure TIMESTAMP: 2023's ``2023-11-16 18:15:46.6805900``, 2024's with a UTC offset
#: (``2024-05-10 00:00:00.009930+00:00``). ASCII digits only, ranges checked by the pattern;
#: pyarrow's reader checks its cells against the same pattern (RE2 reads it alike).
TIMESTAMP_PATTERN = (
    r"[ \t]*(([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([01]?[0-9]|2[0-3]):([0-5][0-9])):"
    r"((?:[0-5][0-9]|60)(?:\.[0-9]*)?)(Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)?[ \t]*"
)
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)
_MOONCAKE_KEYS = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
_SCHEDKIT_KEYS = frozenset(f.name for f in dataclasses.fields(TraceRequest))
_MOONCAKE_BLOCK_TOKENS = 512
_BUILD_CHUNK = 1 << 16  # requests built from the columns at a time

#: Reads at least this large go to pyarrow when it is installed (benchmarks/traces/reader.md):
#: it reads rows ~7x faster than csv and loads requests ~2x faster, but its import takes
#: ~0.08 s and ~45 MB, in which the csv reader has read ~30,000 rows.
PYARROW_MIN_BYTES = 8 << 20  # ~200,000 rows of an Azure trace
PYARROW_MIN_REQUESTS = 200_000
Reader = Literal["auto", "csv", "pyarrow"]


class _RowError(ValueError):
    """A problem with one line of a trace file; the caller adds the file and line number."""


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


def _lines(source: TraceSource, before_block: Callable[[int], None] | None = None) -> Iterator[str]:
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


def _stop_at(max_rows: int | None) -> int:
    """Rows to read: ``max_rows``, or one past the request limit (then the rest is counted)."""
    limit = max_requests()
    return max_rows if max_rows is not None and max_rows <= limit else limit + 1


# --- value checks ------------------------------------------------------------------------------


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _RowError(f"{field} must be a non-negative integer, got {quote(value)}")
    return value


def _tokens(value: object, field: str) -> int:
    count = _count(value, field)
    if count > MAX_TOKENS:
        raise _RowError(
            f"{field} {quote(count)} is more than {MAX_TOKENS:,} tokens, longer than any model's"
            " context; check the column"
        )
    return count


def _number(value: object, field: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _RowError(f"{field} must be a finite number, got {quote(value)}")
    if value < 0 or (positive and value == 0):
        raise _RowError(f"{field} must be {'> 0' if positive else '>= 0'}, got {quote(value)}")
    return float(value)


# --- Azure CSV ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AzureRows:
    """An Azure trace's rows as columns, in file order: the arrival as a day number (from
    any epoch) and seconds into that day, UTC where the file gives offsets."""

    day: npt.NDArray[np.int64]
    seconds: npt.NDArray[np.float64]
    prompt: npt.NDArray[np.int64]
    output: npt.NDArray[np.int64]


def azure_header(cells: list[str], origin: str) -> tuple[list[str], int, int, int]:
    """A header row's names, stripped, and the indexes of TIMESTAMP, ContextTokens and
    GeneratedTokens among them."""
    header = [cell.strip() for cell in cells]
    if not set(AZURE_COLUMNS) <= set(header):
        raise SchedkitError(
            f"{origin}: line 1: expected the Azure trace header {','.join(AZURE_COLUMNS)},"
            f" got {quote(','.join(cells))}"
        )
    i_time, i_prompt, i_output = (header.index(c) for c in AZURE_COLUMNS)
    return header, i_time, i_prompt, i_output


def read_azure_header(source: TraceSource) -> tuple[list[str], int, int, int]:
    """:func:`azure_header` of a file's first row, read no further."""
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        return azure_header(next(csv.reader(_lines(source)), []), source.origin)
    finally:
        csv.field_size_limit(field_limit)


def _bad_time(raw: str) -> _RowError:
    return _RowError(
        f"bad TIMESTAMP {quote(raw)}; expected 'YYYY-MM-DD HH:MM:SS[.fraction]', optionally"
        " with a UTC offset (+00:00)"
    )


def _azure_time(
    raw: str, minutes: dict[tuple[str, str | None], tuple[int, float]]
) -> tuple[int, float]:
    """``2023-11-16 18:15:46.6805900`` -> (day ordinal, seconds into the day), in UTC when an
    offset follows. ``minutes`` caches each minute's (day, seconds): a date per row is slow."""
    match = _TIMESTAMP.fullmatch(raw)
    if match is None:
        raise _bad_time(raw)
    minute_text, day_text, hours, mins, seconds, zone = match.groups()
    if (start := minutes.get((minute_text, zone))) is None:
        try:
            day = date.fromisoformat(day_text).toordinal()
        except ValueError:
            raise _bad_time(raw) from None
        hour, minute = int(hours), int(mins)
        if zone and zone != "Z":  # whole minutes, so the seconds add up as without an offset
            shift = int(zone[1:3]) * 60 + (int(zone[-2:]) if len(zone) > 3 else 0)
            extra, clock = divmod(hour * 60 + minute - (shift if zone[0] == "+" else -shift), 1440)
            day, (hour, minute) = day + extra, divmod(clock, 60)
        if len(minutes) >= 4096:  # a trace spans a few thousand minutes; keep it bounded
            minutes.clear()
        start = minutes[minute_text, zone] = (day, hour * 3600.0 + minute * 60.0)
    return start[0], start[1] + float(seconds)


def _int_cell(cell: str, column: str) -> int:
    try:
        value = int(cell)
    except ValueError:
        raise _RowError(f"{column} {quote(cell)} is not an integer token count") from None
    return _tokens(value, column)


def _csv_error(exc: csv.Error, limit: int) -> _RowError:
    if str(exc).startswith("field larger than field limit"):
        return _RowError(
            f"a cell is longer than {limit:,} characters, the most one may hold (a cell holds"
            ' a time or a count); check the quoting: a quote (") left open runs a cell on'
            " over the lines that follow"
        )
    return _RowError(f"not CSV: {exc}")


def read_azure_rows(source: TraceSource, max_rows: int | None = None) -> AzureRows:
    """The rows of an Azure CSV read with the ``csv`` module: the first ``max_rows`` (all
    when ``None``), blank lines skipped.

    Raises :class:`SchedkitError` naming the line: a bad header, row or cell; a cell longer
    than ``MAX_LINE_BYTES`` (``csv.field_size_limit``, set for the read); a row whose quoted
    cells run over more than that; more rows than the request limit.
    """
    origin, stop = source.origin, _stop_at(max_rows)
    minutes: dict[tuple[str, str | None], tuple[int, float]] = {}
    day, prompt, output = array("q"), array("q"), array("q")
    seconds = array("d")
    skipped = [0]  # records read but not kept: blank lines, rows counted past the limit
    extra = 0  # rows past the request limit, counted for the message

    done, since, last = -1, 0, 0

    def check_row_size(size: int) -> None:
        # csv reads a row whose quoted cells run over line breaks whole before returning
        # it: one that has taken more than MAX_LINE_BYTES of whole blocks is refused.
        nonlocal done, since, last
        now = len(prompt) + skipped[0]
        since, done, last = (since + last if now == done else 0), now, size
        if since > MAX_LINE_BYTES:
            raise SchedkitError(
                f"{origin}: line {reader.line_num:,}: one CSV row runs over more than"
                f' {MAX_LINE_BYTES:,} bytes; check the quoting: a quote (") left open'
                " runs a cell on over the lines that follow"
            )

    reader = csv.reader(_lines(source, check_row_size))
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)  # process-wide: restored below
    try:
        header, i_time, i_prompt, i_output = azure_header(next(reader, []), origin)
        width = len(header)
        add_day, add_seconds = day.append, seconds.append
        add_prompt, add_output = prompt.append, output.append
        for cells in reader:
            if len(cells) != width:
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    skipped[0] += 1
                    continue
                raise _RowError(
                    f"expected {width} columns ({quote(','.join(header))}), got {len(cells)}"
                )
            try:  # fast path; the helpers below re-read a bad cell to say what is wrong
                tokens_in, tokens_out = int(cells[i_prompt]), int(cells[i_output])
            except ValueError:
                tokens_in = tokens_out = -1
            if not (0 <= tokens_in <= MAX_TOKENS and 0 <= tokens_out <= MAX_TOKENS):
                _int_cell(cells[i_prompt], "ContextTokens")
                _int_cell(cells[i_output], "GeneratedTokens")
            when, secs = _azure_time(cells[i_time], minutes)
            add_day(when)
            add_seconds(secs)
            add_prompt(tokens_in)
            add_output(tokens_out)
            if len(prompt) >= stop:
                break
        if len(prompt) > max_requests():
            for cells in reader:
                skipped[0] += 1
                extra += bool(cells) and (len(cells) > 1 or bool(cells[0].strip()))
            count = len(prompt) + extra
            check_requests(count if max_rows is None else min(count, max_rows), f"trace {origin}")
    except _RowError as exc:
        raise SchedkitError(f"{origin}: line {reader.line_num:,}: {exc}") from None
    except csv.Error as exc:
        problem = _csv_error(exc, MAX_LINE_BYTES)
        raise SchedkitError(f"{origin}: line {reader.line_num:,}: {problem}") from None
    finally:
        csv.field_size_limit(field_limit)
    return AzureRows(
        np.frombuffer(day, np.int64),
        np.frombuffer(seconds, np.float64),
        np.frombuffer(prompt, np.int64),
        np.frombuffer(output, np.int64),
    )


def azure_requests(rows: AzureRows, origin: str, id_prefix: str) -> list[TraceRequest]:
    """Requests from ``rows``, arriving at offsets from the earliest row, in file order."""
    if not len(rows.day):
        raise SchedkitError(f"{origin}: the trace has a header but no requests; add rows")
    day0 = rows.day.min()
    seconds0 = rows.seconds[rows.day == day0].min()
    # The operations and their order are those of Python floats over (day, seconds):
    # ((day - day0) * 86400 + seconds) - seconds0, so both readers give the same arrivals.
    arrivals = ((rows.day - day0) * 86400 + rows.seconds) - seconds0
    requests: list[TraceRequest] = []
    collecting = gc.isenabled()
    gc.disable()  # millions of new objects, none garbage: collections would double the time
    try:
        _build(requests, arrivals, rows, id_prefix)
    finally:
        if collecting:
            gc.enable()
    return requests


def _build(
    requests: list[TraceRequest],
    arrivals: npt.NDArray[np.float64],
    rows: AzureRows,
    id_prefix: str,
) -> None:
    for start in range(0, len(arrivals), _BUILD_CHUNK):
        part = slice(start, start + _BUILD_CHUNK)
        ids = [f"{id_prefix}-{i:06d}" for i in range(start, start + len(arrivals[part]))]
        requests.extend(
            map(
                TraceRequest,
                ids,
                arrivals[part].tolist(),
                rows.prompt[part].tolist(),
                rows.output[part].tolist(),
            )
        )


def _pyarrow_pays(source: TraceSource, max_rows: int | None) -> bool:
    return source.size >= PYARROW_MIN_BYTES and (
        max_rows is None or max_rows >= PYARROW_MIN_REQUESTS
    )


def parse_azure_csv(
    source: TraceSource, id_prefix: str, max_rows: int | None = None, reader: Reader = "auto"
) -> list[TraceRequest]:
    """Requests from an Azure CSV (its first ``max_rows`` rows when given), named
    ``<id_prefix>-<row index>``. ``reader`` picks ``csv`` or ``pyarrow`` (which falls back
    to ``csv`` on whatever it declines); ``auto`` takes pyarrow for large reads when it is
    installed (``PYARROW_MIN_BYTES``, ``PYARROW_MIN_REQUESTS``)."""
    rows = None
    if reader == "pyarrow" or (reader == "auto" and _pyarrow_pays(source, max_rows)):
        try:  # deferred: pyarrow is optional, and its import takes ~0.1 s
            from schedkit.sim import trace_arrow
        except ImportError:
            pass
        else:
            rows = trace_arrow.read_azure_rows_pyarrow(source, max_rows)
    if rows is None:
        rows = read_azure_rows(source, max_rows)
    return azure_requests(rows, source.origin, id_prefix)


# --- JSONL -------------------------------------------------------------------------------------


def _hash_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise _RowError(f"hash_ids must be a list of integers, got {quote(value)}")
    return tuple(value)


def _check_keys(obj: dict[str, object], known: frozenset[str], required: tuple[str, ...]) -> None:
    if unknown := sorted(obj.keys() - known):
        raise _RowError(
            f"unknown field(s) {quote(unknown)}; this format's fields are {sorted(known)}"
        )
    if missing := [key for key in required if key not in obj]:
        raise _RowError(f"missing required field(s) {missing}")


def _mooncake_row(obj: dict[str, object], request_id: str) -> TraceRequest:
    _check_keys(obj, _MOONCAKE_KEYS, ("timestamp", "input_length", "output_length"))
    return TraceRequest(
        request_id,
        _number(obj["timestamp"], "timestamp") / 1000.0,
        _tokens(obj["input_length"], "input_length"),
        _tokens(obj["output_length"], "output_length"),
        hash_ids=_hash_ids(obj.get("hash_ids", [])),
    )


def _schedkit_row(obj: dict[str, object], default_id: str) -> TraceRequest:
    _check_keys(obj, _SCHEDKIT_KEYS, ("arrival_s", "prompt_tokens", "output_tokens"))
    request_id, tenant = obj.get("request_id", default_id), obj.get("tenant", "default")
    for field, value in (("request_id", request_id), ("tenant", tenant)):
        if not isinstance(value, str) or not value:
            raise _RowError(f"{field} must be a non-empty string, got {quote(value)}")
    priority = obj.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise _RowError(
            f"priority must be an integer (lower is more important), got {quote(priority)}"
        )
    ttft, tpot = obj.get("slo_ttft_ms"), obj.get("slo_tpot_ms")
    return TraceRequest(
        str(request_id),
        _number(obj["arrival_s"], "arrival_s"),
        _tokens(obj["prompt_tokens"], "prompt_tokens"),
        _tokens(obj["output_tokens"], "output_tokens"),
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
        raise _RowError(
            'the header line must be {"workload": {"name": ..., "source": ...,'
            f' "hash_block_tokens": ...}}}} with only those keys, got {quote(obj)}'
        )
    name, source = meta.get("name", ""), meta.get("source", "")
    if not isinstance(name, str) or not isinstance(source, str):
        raise _RowError(f"workload name and source must be strings, got {quote(meta)}")
    return name, source, _count(meta.get("hash_block_tokens", 0), "hash_block_tokens")


def parse_jsonl(
    source: TraceSource, stem: str, attribution: str = "", max_rows: int | None = None
) -> Workload:
    """Mooncake or schedkit JSONL, told apart by the keys of the first request line; its
    first ``max_rows`` requests when given."""
    origin, stop = source.origin, _stop_at(max_rows)
    fmt, name, block_tokens = "", stem, 0
    requests: list[TraceRequest] = []
    seen_ids: set[str] = set()
    lines = enumerate(_lines(source), start=1)
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            try:
                obj = parse_document(line, "json")
            except json.JSONDecodeError as exc:
                raise _RowError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
            except ValueError as exc:  # NestingError, or an integer of over 4,300 digits
                raise _RowError(f"not a request: {exc}") from None
            if not isinstance(obj, dict):
                raise _RowError(f"expected a JSON object, got {type(obj).__name__}")
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
                    raise _RowError(f"duplicate request_id {quote(request.request_id)}")
                if request.hash_ids and not block_tokens:
                    raise _RowError(
                        'hash_ids need a block size: start the file with {"workload":'
                        ' {"hash_block_tokens": N}}'
                    )
                seen_ids.add(request.request_id)
                requests.append(request)
        except _RowError as exc:
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
