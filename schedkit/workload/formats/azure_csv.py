"""Azure CSV traces (``TIMESTAMP,ContextTokens,GeneratedTokens``), parsed into requests.

Read with the standard ``csv`` module (quoted cells holding commas, quotes and line
breaks; a byte-order mark; CRLF; quoted, reordered or extra columns), streamed as
:mod:`schedkit.workload.source` streams every trace, or with pyarrow
(:mod:`schedkit.workload.formats.azure_arrow`) when it is installed and the read is large enough for it
to be faster (measured in ``benchmarks/speed/trace-reader.md``). The csv reader is the reference:
pyarrow reads only what the csv reader reads the same way, to the bit, and declines
anything unusual or wrong, which the csv reader then reads or reports.
"""

from __future__ import annotations

import csv
import gc
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date

import numpy as np
import numpy.typing as npt

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import MAX_LINE_BYTES
from schedkit.workload.limits import MAX_TOKENS, check_requests, max_requests
from schedkit.workload.model import TraceRequest
from schedkit.workload.source import (
    RowError,
    TraceSource,
    rows_to_read,
    token_count,
    trace_lines,
)

__all__ = [
    "AZURE_COLUMNS",
    "TIMESTAMP_PATTERN",
    "AzureRows",
    "azure_header",
    "azure_requests",
    "read_azure_header",
    "read_azure_rows",
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
_BUILD_CHUNK = 1 << 16  # requests built from the columns at a time

#: Reads at least this large go to pyarrow when it is installed (benchmarks/speed/trace-reader.md):
#: it reads rows ~7x faster than csv and loads requests ~2x faster, but its import takes
#: ~0.08 s and ~45 MB, in which the csv reader has read ~30,000 rows.


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
        return azure_header(next(csv.reader(trace_lines(source)), []), source.origin)
    finally:
        csv.field_size_limit(field_limit)


def _bad_time(raw: str) -> RowError:
    return RowError(
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
        raise RowError(f"{column} {quote(cell)} is not an integer token count") from None
    return token_count(value, column)


def _csv_error(exc: csv.Error, limit: int) -> RowError:
    if str(exc).startswith("field larger than field limit"):
        return RowError(
            f"a cell is longer than {limit:,} characters, the most one may hold (a cell holds"
            ' a time or a count); check the quoting: a quote (") left open runs a cell on'
            " over the lines that follow"
        )
    return RowError(f"not CSV: {exc}")


def read_azure_rows(source: TraceSource, max_rows: int | None = None) -> AzureRows:
    """The rows of an Azure CSV read with the ``csv`` module: the first ``max_rows`` (all
    when ``None``), blank lines skipped.

    Raises :class:`SchedkitError` naming the line: a bad header, row or cell; a cell longer
    than ``MAX_LINE_BYTES`` (``csv.field_size_limit``, set for the read); a row whose quoted
    cells run over more than that; more rows than the request limit.
    """
    origin, stop = source.origin, rows_to_read(max_rows)
    day, prompt, output = array("q"), array("q"), array("q")
    seconds = array("d")
    skipped = [0]  # records read but not kept: blank lines, rows counted past the limit
    check = _row_size_check(origin, lambda: len(prompt) + skipped[0], lambda: reader.line_num)
    reader = csv.reader(trace_lines(source, check))
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)  # process-wide: restored below
    try:
        header, i_time, i_prompt, i_output = azure_header(next(reader, []), origin)
        at = (i_time, i_prompt, i_output)
        _read_cells(reader, header, at, (day, seconds, prompt, output), skipped, stop)
        if len(prompt) > max_requests():
            count = len(prompt) + _count_rest(reader, skipped)
            check_requests(count if max_rows is None else min(count, max_rows), f"trace {origin}")
    except RowError as exc:
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


def _row_size_check(
    origin: str, rows_read: Callable[[], int], line: Callable[[], int]
) -> Callable[[int], None]:
    """What :func:`trace_lines` calls with each block's size: csv reads a row whose quoted
    cells run over line breaks whole before returning it, so one that has taken more than
    ``MAX_LINE_BYTES`` of whole blocks (``rows_read`` not moving) is refused."""
    done, since, last = -1, 0, 0

    def check_row_size(size: int) -> None:
        nonlocal done, since, last
        now = rows_read()
        since, done, last = (since + last if now == done else 0), now, size
        if since > MAX_LINE_BYTES:
            raise SchedkitError(
                f"{origin}: line {line():,}: one CSV row runs over more than"
                f' {MAX_LINE_BYTES:,} bytes; check the quoting: a quote (") left open'
                " runs a cell on over the lines that follow"
            )

    return check_row_size


def _read_cells(
    reader: Iterator[list[str]],
    header: list[str],
    at: tuple[int, int, int],
    columns: tuple[array[int], array[float], array[int], array[int]],
    skipped: list[int],
    stop: int,
) -> None:
    """Append each row's (day, seconds, prompt, output) to ``columns`` until ``stop`` rows
    are kept; ``at``: the indexes of TIMESTAMP, ContextTokens and GeneratedTokens. Blank
    lines count in ``skipped``. Raises :class:`RowError` for a bad row or cell."""
    i_time, i_prompt, i_output = at
    width = len(header)
    minutes: dict[tuple[str, str | None], tuple[int, float]] = {}
    day, seconds, prompt, output = columns
    add_day, add_seconds = day.append, seconds.append
    add_prompt, add_output = prompt.append, output.append
    for cells in reader:
        if len(cells) != width:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                skipped[0] += 1
                continue
            raise RowError(
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


def _count_rest(reader: Iterator[list[str]], skipped: list[int]) -> int:
    """The rows left in ``reader``, read to its end (each record counted in ``skipped``),
    blank lines not counted: how far a trace goes past the request limit."""
    extra = 0
    for cells in reader:
        skipped[0] += 1
        extra += bool(cells) and (len(cells) > 1 or bool(cells[0].strip()))
    return extra


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
