"""BurstGPT traces (Wang et al., 2024; github.com/HPMLL/BurstGPT, CC-BY 4.0): CSV with
``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``.

``Timestamp`` is seconds from the trace's start; arrivals are offsets from the earliest
row read. ``Model`` (``ChatGPT``, ``GPT-4``) becomes the request's tenant, so the two
services' requests can be told apart (fairness policies, per-tenant metrics). Rows with
0 response tokens are requests that failed in the original service: they are skipped,
and the workload's source says how many. Read with the standard ``csv`` module,
streamed as every trace is (``schedkit.workload.source``), the first ``max_rows`` rows
only when given.
"""

from __future__ import annotations

import csv
import math

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import MAX_LINE_BYTES
from schedkit.workload.limits import check_requests
from schedkit.workload.model import TraceRequest, Workload
from schedkit.workload.source import RowError, TraceSource, rows_to_read, token_count, trace_lines

__all__ = ["BURSTGPT_COLUMNS", "is_burstgpt_header", "parse_burstgpt_csv"]

BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")


def is_burstgpt_header(source: TraceSource) -> bool:
    """Whether the file's first row names BurstGPT's columns."""
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        header = [cell.strip() for cell in next(csv.reader(trace_lines(source)), [])]
    except csv.Error:
        return False
    finally:
        csv.field_size_limit(field_limit)
    return set(BURSTGPT_COLUMNS) <= set(header)


def _int(cell: str, field: str) -> int:
    try:
        value = int(cell.strip())
    except ValueError:
        raise RowError(f"{field} must be a non-negative integer, got {quote(cell)}") from None
    return token_count(value, field)


def _seconds(cell: str) -> float:
    try:
        value = float(cell.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RowError(f"Timestamp must be a finite number of seconds >= 0, got {quote(cell)}")
    return value


def parse_burstgpt_csv(source: TraceSource, name: str, max_rows: int | None) -> Workload:
    """The requests of a BurstGPT CSV, named ``<name>-<row index>``."""
    origin, stop = source.origin, rows_to_read(max_rows)
    rows: list[tuple[float, str, int, int]] = []
    failed = 0
    reader = csv.reader(trace_lines(source))
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        header = [cell.strip() for cell in next(reader, [])]
        i_time, i_model, i_prompt, i_output = (header.index(c) for c in BURSTGPT_COLUMNS)
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) != len(header):
                raise RowError(f"expected {len(header)} columns, got {len(cells)}")
            output = _int(cells[i_output], "Response tokens")
            prompt = _int(cells[i_prompt], "Request tokens")
            when = _seconds(cells[i_time])
            if output == 0:
                failed += 1
                continue
            rows.append((when, cells[i_model].strip() or "default", prompt, output))
            if len(rows) >= stop:
                break
        check_requests(len(rows), f"trace {origin}")
    except RowError as exc:
        raise SchedkitError(f"{origin}: line {reader.line_num:,}: {exc}") from None
    except csv.Error as exc:
        raise SchedkitError(f"{origin}: line {reader.line_num:,}: {exc}") from None
    finally:
        csv.field_size_limit(field_limit)
    if not rows:
        raise SchedkitError(f"{origin}: the trace has a header but no completed requests")
    start = min(row[0] for row in rows)
    requests = tuple(
        TraceRequest(f"{name}-{i:06d}", when - start, max(1, prompt), output, tenant=model)
        for i, (when, model, prompt, output) in enumerate(rows)
    )
    skipped = f"; {failed:,} failed requests (0 response tokens) skipped" if failed else ""
    return Workload(name, requests, 0, f"BurstGPT trace {origin}{skipped}")
