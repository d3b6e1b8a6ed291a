"""Other load generators on schedkit's workloads, and their results in schedkit's paired
comparison.

- ``export_mooncake(workload, path)``: the workload as a Mooncake trace (JSONL:
  ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` in 512-token
  blocks), which aiperf replays on its timestamps (``aiperf profile --input-file FILE
  --custom-dataset-type mooncake_trace``) and which schedkit reads back. A workload
  hashed in smaller blocks is re-blocked: a 512-token block is shared when all its
  smaller blocks are; requests without hashes get hashes of their own.
- ``--engine import --target FILE`` (``run_import_arm``): an arm whose per-request
  results come from a file another tool wrote while replaying the same workload: aiperf's
  ``profile_export.jsonl``, a ``vllm bench serve --save-result --save-detailed`` JSON
  (schedkit's ``vllm-bench-*.json`` too) or guidellm's ``--output kind=json`` of a trace
  replay. Requests are matched by position (aiperf's ``session_num``; guidellm's offset
  in the trace), and every one's prompt length (guidellm: its offset) must be the
  workload's, or the import stops naming the first that differs: a paired comparison of
  different streams would mean nothing. Times are the tool's: TTFT and E2E from when it sent the request, so the
  tool's own send delay is not in them.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedkit.bench.engines.requests import new_record
from schedkit.errors import SchedkitError, quote
from schedkit.facade import PolicyFacade
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.recorder import Recorder
from schedkit.workload import TraceRequest, Workload

if TYPE_CHECKING:
    from schedkit.bench.spec import PreparedBench

__all__ = ["MOONCAKE_BLOCK", "export_mooncake", "read_results", "run_import_arm"]

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake format


def _hash_ids(request: TraceRequest, index: int, block_tokens: int) -> list[int]:
    """The request's prompt in 512-token blocks, ids equal where the prefix is shared."""
    blocks = -(-request.prompt_tokens // MOONCAKE_BLOCK)
    if block_tokens == MOONCAKE_BLOCK:
        return list(request.hash_ids[:blocks])
    ids: list[int] = []
    per = (
        MOONCAKE_BLOCK // block_tokens if block_tokens and not MOONCAKE_BLOCK % block_tokens else 0
    )
    for b in range(blocks):
        part = request.hash_ids[b * per : (b + 1) * per] if per else ()
        if per and len(part) == per:  # a whole 512-token block of shared ones
            digest = hashlib.blake2b(repr(tuple(part)).encode(), digest_size=6).digest()
            ids.append(int.from_bytes(digest, "big"))
        else:  # private to this request
            ids.append((1 << 48) + index * 4096 + b)
    return ids


def export_mooncake(workload: Workload, path: Path) -> int:
    """Write ``workload`` as a Mooncake trace; returns the requests written."""
    lines = []
    for i, r in enumerate(workload.requests):
        row = {
            "timestamp": round(r.arrival_s * 1000.0, 3),
            "input_length": r.prompt_tokens,
            "output_length": r.output_tokens,
            "hash_ids": _hash_ids(r, i, workload.hash_block_tokens),
        }
        lines.append(json.dumps(row, separators=(",", ":")))
    try:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SchedkitError(f"cannot write {quote(str(path))}: {exc.strerror or exc}") from None
    return len(lines)


# -- reading another tool's per-request results ----------------------------------------


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _metric(metrics: dict[str, Any], name: str) -> Any:
    """An aiperf record's metric value (``{"value": v, "unit": u}``), or None."""
    value = metrics.get(name)
    return value.get("value") if isinstance(value, dict) else None


def _read_aiperf(path: Path) -> list[dict[str, Any]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            meta, metrics = record.get("metadata") or {}, record.get("metrics") or {}
        except (ValueError, AttributeError):
            raise SchedkitError(f"{path}: line {n}: not an aiperf record") from None

        error = record.get("error")
        prompt = _metric(metrics, "input_sequence_length") or _metric(metrics, "error_isl")
        ttft = _num(_metric(metrics, "time_to_first_token"))
        latency = _num(_metric(metrics, "request_latency"))
        gaps = _metric(metrics, "inter_chunk_latency")
        rows.append((int(meta.get("session_num", n - 1)), {
            "prompt": int(prompt) if isinstance(prompt, int | float) else None,
            "output": int(_metric(metrics, "output_sequence_length") or 0),
            "ttft_s": None if ttft is None else ttft / 1e3,
            "latency_s": None if latency is None else latency / 1e3,
            "gaps_s": [g / 1e3 for g in gaps if _num(g) is not None] if isinstance(gaps, list) else [],
            "error": (error.get("message") or error.get("type") or "error") if isinstance(error, dict) else "",
        }))  # fmt: skip
    return [row for _, row in sorted(rows, key=lambda item: item[0])]


def _read_vllm(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    needed = ("input_lens", "output_lens", "ttfts", "latencies")
    missing = [k for k in needed if not isinstance(data.get(k), list)]
    if missing:
        raise SchedkitError(
            f"{path}: a vllm bench serve result without its per-request lists"
            f" ({', '.join(missing)}); save it with --save-result --save-detailed"
        )
    n = len(data["input_lens"])
    given_errors, given_itls = data.get("errors"), data.get("itls")
    errors: list[Any] = given_errors if isinstance(given_errors, list) else [""] * n
    itls: list[Any] = given_itls if isinstance(given_itls, list) else [[]] * n
    return [
        {
            "prompt": int(data["input_lens"][i]),
            "output": int(data["output_lens"][i] or 0),
            "ttft_s": _num(data["ttfts"][i]),
            "latency_s": _num(data["latencies"][i]),
            "gaps_s": [g for g in itls[i] if _num(g) is not None] if isinstance(itls[i], list) else [],
            "error": str(errors[i] or ""),
        }
        for i in range(n)
    ]  # fmt: skip


def _read_guidellm(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """guidellm's ``--output kind=json`` result of one trace replay: its requests in the
    trace's order (``info.settings.relative_timestamp``, the request's offset in the trace),
    paired by that offset rather than by prompt length: guidellm synthesizes each prompt's
    text and counts its tokens again with its own tokenizer."""
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or len(benchmarks) != 1:
        count = len(benchmarks) if isinstance(benchmarks, list) else 0
        raise SchedkitError(
            f"{path}: a guidellm result with {count} benchmarks; an arm is one replay of the"
            " workload: run guidellm with --profile kind=replay, one file per arm"
        )
    requests = benchmarks[0].get("requests") if isinstance(benchmarks[0], dict) else None
    if not isinstance(requests, dict):
        raise SchedkitError(f"{path}: a guidellm result without its per-request list")
    rows: list[tuple[float, float, dict[str, Any]]] = []
    for status in ("successful", "errored", "incomplete"):
        for record in requests.get(status) or []:
            info = record.get("info") or {}
            offset = _num((info.get("settings") or {}).get("relative_timestamp"))
            if offset is None:
                raise SchedkitError(
                    f"{path}: request {record.get('request_id')} has no trace offset"
                    " (info.settings.relative_timestamp): replay the workload with"
                    " --profile kind=replay and --data kind=mooncake (docs/interop.md)"
                )
            ttft = _num(record.get("time_to_first_token_ms"))
            error = "" if status == "successful" else str(info.get("error") or status)
            rows.append((offset, _num(record.get("request_start_time")) or 0.0, {
                "prompt": None,  # guidellm's own count of its synthesized prompt
                "offset_s": offset,
                "output": int(record.get("output_tokens") or 0),
                "ttft_s": None if ttft is None else ttft / 1e3,
                "latency_s": _num(record.get("request_latency")),
                "gaps_s": [],
                "error": error,
            }))  # fmt: skip
    return [row for *_, row in sorted(rows, key=lambda item: (item[0], item[1]))]


def read_results(path: Path) -> list[dict[str, Any]]:
    """Per-request results from an aiperf ``profile_export.jsonl``, a vLLM bench JSON or a
    guidellm result JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchedkitError(
            f"cannot read --target {quote(str(path))}: {exc.strerror or exc}"
        ) from None
    try:
        data = json.loads(text)
    except ValueError:
        return _read_aiperf(path)  # JSON Lines
    if isinstance(data, dict) and "input_lens" in data:
        return _read_vllm(data, path)
    if isinstance(data, dict) and "benchmarks" in data:
        return _read_guidellm(data, path)
    if isinstance(data, dict) and "metadata" in data:
        return _read_aiperf(path)  # a one-record JSONL file
    raise SchedkitError(
        f"{path}: neither an aiperf profile_export.jsonl, a vllm bench serve result JSON nor"
        " a guidellm result JSON"
    )


def run_import_arm(bench: PreparedBench, index: int, rate_scale: float) -> RunResult:
    """``--engine import``: arm ``index``'s records from its ``--target`` file."""
    path = Path(bench.spec.live.targets[index])
    rows = read_results(path)
    traces = sorted(bench.workload(rate_scale).requests, key=lambda r: r.arrival_s)
    if len(rows) != len(traces):
        raise SchedkitError(
            f"{path} has {len(rows):,} requests, the workload {len(traces):,}: give the tool"
            " the same workload (schedkit export) and the same --max-requests"
        )
    records = [new_record(t) for t in traces]
    facade = PolicyFacade.from_config(bench.configs[index])
    result = RunResult(policy=facade.label, records=records, duration_s=0.0)
    recorder = Recorder(result, bench.sim_config.timeline_interval_s)
    end, start = 0.0, traces[0].arrival_s if traces else 0.0
    for i, (rec, row) in enumerate(zip(records, rows, strict=True)):
        offset = row.get("offset_s")
        if offset is not None and abs(offset - (rec.arrival_s - start)) > 1e-3:
            hint = (
                " (schedkit export writes milliseconds: give guidellm time_scale=0.001)"
                if offset > 100 * (rec.arrival_s - start) > 0
                else ""
            )
            raise SchedkitError(
                f"{path}: request {i} was sent {offset:.3f} s into the trace, the workload's"
                f" {rec.arrival_s - start:.3f} s: not the same request stream, so no paired"
                f" comparison{hint}"
            )
        if row["prompt"] is not None and row["prompt"] != rec.prompt_tokens:
            raise SchedkitError(
                f"{path}: request {i} has a {row['prompt']}-token prompt, the workload's"
                f" {rec.prompt_tokens}: not the same request stream, so no paired comparison"
            )
        _fill(rec, row, recorder)
        end = max(end, rec.finish_s or 0.0)
    errors: dict[str, int] = {}
    for rec in records:
        if rec.finish_reason == "error":
            errors[rec.reject_reason] = errors.get(rec.reject_reason, 0) + 1
    result.errors = errors
    bench.engine_info.setdefault("imported", {})[bench.labels[index]] = str(path)
    bench.engine_info["gpu"] = "as measured by the tool that wrote the file"
    bench.engine_info.pop("cost_model", None)
    return recorder.finish(end, 0, facade, 0.0)


def _fill(rec: RequestRecord, row: dict[str, Any], recorder: Recorder) -> None:
    if row["error"] or row["ttft_s"] is None or row["latency_s"] is None:
        rec.finish_reason, rec.reject_reason = "error", row["error"] or "no result"
        return
    rec.first_token_s = rec.arrival_s + row["ttft_s"]
    rec.finish_s = rec.arrival_s + row["latency_s"]
    rec.output_tokens = row["output"]
    rec.finish_reason = "length" if rec.output_tokens >= rec.max_tokens else "stop"
    gaps = row["gaps_s"]
    if gaps:
        for gap in gaps:
            recorder.token_gap(gap, 1)
    elif rec.output_tokens > 1:  # only the totals: the mean gap for each later token
        recorder.token_gap((rec.finish_s - rec.first_token_s) / (rec.output_tokens - 1),
                           rec.output_tokens - 1)  # fmt: skip
