"""Azure-format trace CSVs (``TIMESTAMP,ContextTokens,GeneratedTokens``): the reader for a
file, ``csv`` (:mod:`~schedkit.workload.formats.azure_csv`) or, for large reads where it
is installed, ``pyarrow`` (:mod:`~schedkit.workload.formats.azure_arrow`), which reads the
same rows alike and falls back to ``csv`` on whatever it declines."""

from __future__ import annotations

from typing import Literal

from schedkit.workload.formats.azure_csv import azure_requests, read_azure_rows
from schedkit.workload.model import TraceRequest
from schedkit.workload.source import TraceSource

__all__ = ["PYARROW_MIN_BYTES", "PYARROW_MIN_REQUESTS", "Reader", "parse_azure_csv"]

PYARROW_MIN_BYTES = 8 << 20  # ~200,000 rows of an Azure trace
PYARROW_MIN_REQUESTS = 200_000
Reader = Literal["auto", "csv", "pyarrow"]


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
            from schedkit.workload.formats import azure_arrow
        except ImportError:
            pass
        else:
            rows = azure_arrow.read_azure_rows_pyarrow(source, max_rows)
    if rows is None:
        rows = read_azure_rows(source, max_rows)
    return azure_requests(rows, source.origin, id_prefix)
