"""Trace file formats: Azure CSV, Mooncake JSONL and schedkit JSONL, parsed into requests.

The formats are described in :mod:`schedkit.sim.workloads`, whose ``load_workload`` reads
the file and picks the parser by suffix. A problem with one line raises ``SchedkitError``
naming the origin, the line number and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import date

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import parse_document
from schedkit.sim.limits import MAX_TOKENS, check_requests
from schedkit.sim.workloads import TraceRequest, Workload

__all__ = ["parse_azure_csv", "parse_jsonl"]

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MOONCAKE_KEYS = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
_SCHEDKIT_KEYS = frozenset(f.name for f in dataclasses.fields(TraceRequest))
_MOONCAKE_BLOCK_TOKENS = 512


class _RowError(ValueError):
    """A problem with one line of a trace file; the caller adds the file and line number."""


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


def _azure_time(raw: str, days: dict[str, int]) -> tuple[int, float]:
    """``2023-11-16 18:15:46.6805900`` -> (day ordinal, seconds into the day).

    Hand-parsed, with each distinct date parsed once: datetime.fromisoformat per row is slower.
    """
    day_text, _, clock = raw.strip().replace("T", " ", 1).partition(" ")
    try:
        if (day := days.get(day_text)) is None:
            day = days[day_text] = date.fromisoformat(day_text).toordinal()
        hours, minutes, seconds = (float(part) for part in clock.split(":"))
        if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 61) or (
            hours % 1 or minutes % 1
        ):
            raise ValueError(raw)
    except ValueError:
        raise _RowError(
            f"bad TIMESTAMP {quote(raw)}; expected 'YYYY-MM-DD HH:MM:SS[.fraction]'"
        ) from None
    return day, hours * 3600 + minutes * 60 + seconds


def _int_cell(cell: str, column: str) -> int:
    try:
        value = int(cell)
    except ValueError:
        raise _RowError(f"{column} {quote(cell)} is not an integer token count") from None
    return _tokens(value, column)


def parse_azure_csv(text: str, origin: str, id_prefix: str) -> list[TraceRequest]:
    lines = text.splitlines()
    check_requests(len(lines) - 1, f"trace {origin}")
    header = [cell.strip() for cell in lines[0].split(",")] if lines else []
    if not set(_AZURE_COLUMNS) <= set(header):
        raise SchedkitError(
            f"{origin}: line 1: expected the Azure trace header {','.join(_AZURE_COLUMNS)},"
            f" got {quote(lines[0] if lines else '')}"
        )
    i_time, i_prompt, i_output = (header.index(c) for c in _AZURE_COLUMNS)
    days: dict[str, int] = {}
    rows: list[tuple[tuple[int, float], int, int]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split(",")
        try:
            if len(cells) != len(header):
                raise _RowError(
                    f"expected {len(header)} columns ({quote(','.join(header))}), got {len(cells)}"
                )
            try:  # fast path; the helpers below re-read a bad cell to say what is wrong
                prompt, output = int(cells[i_prompt]), int(cells[i_output])
            except ValueError:
                prompt = output = -1
            if not (0 <= prompt <= MAX_TOKENS and 0 <= output <= MAX_TOKENS):
                _int_cell(cells[i_prompt], "ContextTokens")
                _int_cell(cells[i_output], "GeneratedTokens")
            rows.append((_azure_time(cells[i_time], days), prompt, output))
        except _RowError as exc:
            raise SchedkitError(f"{origin}: line {lineno}: {exc}") from None
    if not rows:
        raise SchedkitError(f"{origin}: the trace has a header but no requests; add rows")
    day0, secs0 = min(row[0] for row in rows)
    return [
        TraceRequest(f"{id_prefix}-{i:06d}", (day - day0) * 86400 + secs - secs0, prompt, out)
        for i, ((day, secs), prompt, out) in enumerate(rows)
    ]


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


def parse_jsonl(text: str, origin: str, stem: str, source: str = "") -> Workload:
    """Mooncake or schedkit JSONL, told apart by the keys of the first request line."""
    fmt, name, block_tokens = "", stem, 0
    requests: list[TraceRequest] = []
    seen_ids: set[str] = set()
    lines = text.splitlines()
    check_requests(len(lines), f"trace {origin}")
    for lineno, line in enumerate(lines, start=1):
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
                name, source = header_name or name, header_source or source
                fmt = "schedkit"
                continue
            if not fmt:
                fmt = "mooncake" if obj.keys() & {"timestamp", "input_length"} else "schedkit"
                block_tokens = _MOONCAKE_BLOCK_TOKENS if fmt == "mooncake" else 0
            default_id = f"{stem}-{len(requests):06d}"
            if fmt == "mooncake":
                requests.append(_mooncake_row(obj, default_id))
                continue
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
            raise SchedkitError(f"{origin}: line {lineno}: {exc}") from None
    if not requests:
        raise SchedkitError(f"{origin}: no requests; add one JSON object per line")
    if fmt == "mooncake" and (t0 := min(r.arrival_s for r in requests)) > 0:
        requests = [dataclasses.replace(r, arrival_s=r.arrival_s - t0) for r in requests]
    fmt_name = "Mooncake-format" if fmt == "mooncake" else "schedkit JSONL"
    return Workload(name, tuple(requests), block_tokens, source or f"{fmt_name} trace {origin}")
