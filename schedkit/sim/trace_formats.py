"""Moved to ``schedkit.workload.source`` and ``schedkit.workload.formats.jsonl`` (issue #36)."""

from schedkit._moved import warn_moved

warn_moved(__name__, "schedkit.workload.source (and .formats.jsonl)")

from schedkit.workload.formats.jsonl import parse_jsonl  # noqa: E402
from schedkit.workload.source import (  # noqa: E402
    Readable,
    RowError,
    TraceSource,
    json_row,
    rows_to_read,
    token_count,
    trace_blocks,
    trace_lines,
)

__all__ = [
    "Readable",
    "RowError",
    "TraceSource",
    "json_row",
    "parse_jsonl",
    "rows_to_read",
    "token_count",
    "trace_blocks",
    "trace_lines",
]
