"""Trace files in JSONL: Mooncake's (``timestamp`` ms, ``input_length``, ``output_length``,
``hash_ids``) and schedkit's own (one :class:`~schedkit.workload.TraceRequest` a line, with
an optional header line), told apart by the keys of the first request line."""

from __future__ import annotations

import dataclasses

from schedkit.errors import SchedkitError, quote
from schedkit.workload.limits import check_requests, max_requests
from schedkit.workload.model import TraceRequest, Workload
from schedkit.workload.source import (
    RowError,
    TraceSource,
    count,
    json_row,
    number,
    rows_to_read,
    token_count,
    trace_lines,
)

__all__ = ["parse_jsonl"]

_MOONCAKE_KEYS = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
_SCHEDKIT_KEYS = frozenset(f.name for f in dataclasses.fields(TraceRequest))
_MOONCAKE_BLOCK_TOKENS = 512


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
        number(obj["timestamp"], "timestamp") / 1000.0,
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
    deadline = obj.get("deadline_s")
    return TraceRequest(
        str(request_id),
        number(obj["arrival_s"], "arrival_s"),
        token_count(obj["prompt_tokens"], "prompt_tokens"),
        token_count(obj["output_tokens"], "output_tokens"),
        tenant=str(tenant),
        priority=priority,
        slo_ttft_ms=None if ttft is None else number(ttft, "slo_ttft_ms", positive=True),
        slo_tpot_ms=None if tpot is None else number(tpot, "slo_tpot_ms", positive=True),
        hash_ids=_hash_ids(obj.get("hash_ids", [])),
        deadline_s=None if deadline is None else number(deadline, "deadline_s", positive=True),
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
    return name, source, count(meta.get("hash_block_tokens", 0), "hash_block_tokens")


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
