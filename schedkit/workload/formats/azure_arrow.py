"""pyarrow's CSV parser for Azure traces: the rows the csv reader gives, faster.

:func:`schedkit.workload.formats.azure.parse_azure_csv` uses it for large reads when pyarrow is
installed (benchmarks/speed/trace-reader.md). It reads a file only where it reads it as the csv
reader does, to the bit: the csv module reads the header; the bytes come from
:func:`~schedkit.workload.source.trace_blocks`, with its line and UTF-8 checks, and
pyarrow parses them a block at a time, in this thread (no read-ahead thread left reading
when a truncated read stops); every TIMESTAMP matches the csv reader's pattern and token
counts are plain integers in range. Anything else (a cell with underscores, a leap second,
a file mixing times with and without a UTC offset, a quoted cell running over a block's
end, a malformed row, a line too long) makes it decline, and the csv reader reads the file
from the start and gives its own message.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from schedkit.errors import SchedkitError
from schedkit.workload.formats.azure_csv import TIMESTAMP_PATTERN, AzureRows, read_azure_header
from schedkit.workload.limits import MAX_TOKENS, check_requests, max_requests
from schedkit.workload.source import TraceSource, trace_blocks

__all__ = ["read_azure_rows_pyarrow"]

_FULL = f"^{TIMESTAMP_PATTERN}$"
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)
_NS_DAY, _NS_MINUTE = 86_400 * 10**9, 60 * 10**9
# What reading may raise: pyarrow's parse and conversion errors; the line, UTF-8 and read
# checks of trace_blocks (the csv reader raises them again, at the same line).
_DECLINED = (pa.ArrowException, SchedkitError)


def _block_rows(table: Any) -> tuple[npt.NDArray[Any], ...] | None:
    """(day, seconds, prompt, output) of one block's rows, or ``None`` to decline them."""
    stamps, prompt, output = table.column(0), table.column(1), table.column(2)
    if not pc.all(pc.match_substring_regex(stamps, _FULL)).as_py():
        return None
    # Offsets or none: the first cell says which, and the cast fails on any other kind.
    zoned = _TIMESTAMP.fullmatch(stamps[0].as_py()).group(6)  # type: ignore[union-attr]
    kind = pa.timestamp("ns", tz="UTC") if zoned else pa.timestamp("ns")
    ns = pc.cast(pc.cast(stamps, kind), pa.int64()).to_numpy()
    counts = [column.to_numpy() for column in (prompt, output)]
    if any(c.min() < 0 or c.max() > MAX_TOKENS for c in counts):
        return None
    day = ns // _NS_DAY
    minute, nanos = np.divmod(ns - day * _NS_DAY, _NS_MINUTE)
    hour, minute = np.divmod(minute, 60)
    # As the csv reader sums them: hours * 3600.0 + minutes * 60.0 + float("SS.fraction");
    # nanoseconds / 1e9 is that float, both being the double nearest the decimal.
    seconds = hour * 3600.0 + minute * 60.0 + nanos / 1e9
    return day, seconds, counts[0], counts[1]


def _block_parser(source: TraceSource) -> Callable[[bytes, int], Any]:
    """pyarrow's parser of one block (and its index) of ``source``, whose header the csv
    module reads first: TIMESTAMP kept as text, the token counts as int64, no cell read as
    null, the header row skipped in the first block, in this thread."""
    header, i_time, i_prompt, i_output = read_azure_header(source)
    names = [f"c{i}" for i in range(len(header))]
    wanted = [names[i_time], names[i_prompt], names[i_output]]
    parse = pa_csv.ParseOptions(newlines_in_values=True)
    convert = pa_csv.ConvertOptions(
        include_columns=wanted,
        column_types=dict(zip(wanted, (pa.string(), pa.int64(), pa.int64()), strict=True)),
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )

    def parse_block(block: bytes, index: int) -> Any:
        return pa_csv.read_csv(
            pa.BufferReader(block),
            read_options=pa_csv.ReadOptions(
                column_names=names,
                skip_rows=0 if index else 1,
                block_size=len(block) + 1,
                use_threads=False,
            ),
            parse_options=parse,
            convert_options=convert,
        )

    return parse_block


def read_azure_rows_pyarrow(source: TraceSource, max_rows: int | None = None) -> AzureRows | None:
    """:func:`~schedkit.workload.formats.azure_csv.read_azure_rows`, parsed by pyarrow; ``None``
    where it declines (then the csv reader decides). Raises :class:`SchedkitError` only for
    more rows than the request limit."""
    limit = max_requests()
    stop = max_rows if max_rows is not None and max_rows <= limit else limit + 1
    # Grown in place (realloc), not joined from parts at the end: that would hold each row
    # twice, the freed parts staying in the heap.
    columns: tuple[array[Any], ...] = (array("q"), array("d"), array("q"), array("q"))
    kept = counted = 0
    try:
        parse_block = _block_parser(source)
        for index, block in enumerate(trace_blocks(source)):
            if block.count(b'"') % 2:
                return None  # a quoted cell (or a stray quote) runs on past the block
            table = parse_block(block, index)
            if kept >= stop:
                counted += table.num_rows
                continue
            counted += max(0, table.num_rows - (stop - kept))
            table = table.slice(0, stop - kept)
            if not table.num_rows:
                continue
            rows = _block_rows(table)
            if rows is None:
                return None
            for column, part in zip(columns, rows, strict=True):
                column.frombytes(part.tobytes())
            kept += table.num_rows
            if stop <= kept <= limit:
                break
    except _DECLINED:
        return None
    if kept > limit:
        count = kept + counted
        check_requests(
            count if max_rows is None else min(count, max_rows), f"trace {source.origin}"
        )
    day, seconds, prompt, output = columns
    return AzureRows(
        np.frombuffer(day, np.int64),
        np.frombuffer(seconds, np.float64),
        np.frombuffer(prompt, np.int64),
        np.frombuffer(output, np.int64),
    )
