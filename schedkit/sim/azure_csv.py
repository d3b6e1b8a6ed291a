"""Moved to ``schedkit.workload.formats.azure_csv`` and ``.azure`` (issue #36)."""

from schedkit._moved import warn_moved

warn_moved(__name__, "schedkit.workload.formats.azure_csv (and .azure)")

from schedkit.workload.formats.azure import (  # noqa: E402
    PYARROW_MIN_BYTES,
    PYARROW_MIN_REQUESTS,
    Reader,
    parse_azure_csv,
)
from schedkit.workload.formats.azure_csv import (  # noqa: E402
    AZURE_COLUMNS,
    TIMESTAMP_PATTERN,
    AzureRows,
    azure_header,
    azure_requests,
    read_azure_header,
    read_azure_rows,
)

__all__ = [
    "AZURE_COLUMNS",
    "PYARROW_MIN_BYTES",
    "PYARROW_MIN_REQUESTS",
    "TIMESTAMP_PATTERN",
    "AzureRows",
    "Reader",
    "azure_header",
    "azure_requests",
    "parse_azure_csv",
    "read_azure_header",
    "read_azure_rows",
]
