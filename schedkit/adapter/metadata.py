"""Per-request metadata (``schedkit.metadata``), re-exported for the adapter kit."""

from __future__ import annotations

from schedkit.metadata import (
    DEFAULT_TENANT,
    RequestMetadata,
    parse_metadata,
    parse_priority,
    parse_slo,
)

__all__ = ["DEFAULT_TENANT", "RequestMetadata", "parse_metadata", "parse_priority", "parse_slo"]
