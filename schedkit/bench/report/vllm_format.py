"""Each arm's result in ``vllm bench serve``'s format (``--save-result`` JSON), beside
schedkit's own: ``vllm-bench-<arm>.json``, for the tools that read vLLM's results.

The keys are vLLM's (``vllm/benchmarks/serve.py``): the run (``date``, ``backend``,
``model_id``, ``num_prompts``, ``request_rate``, ``burstiness``, ``max_concurrency``),
the counts and throughputs (``duration``, ``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``request_goodput``, ``output_throughput``, ``total_token_throughput``), per request in
workload order (``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``latencies``,
``start_times``, ``errors``; seconds, 0.0 and an error text for a request that did not
complete), and ``mean_``/``median_``/``std_``/``p99_`` ``ttft``/``tpot``/``itl``/
``e2el`` ``_ms`` over completed requests, as vLLM computes them, with ``p<q>_`` for each
``--metric-percentiles`` of the ``--percentile-metrics`` (``p99_`` of every one, always).
``request_rate`` is ``"inf"`` when every request was sent at once, as vLLM writes it, and
``max_concurrency`` the client's limit (``--max-concurrency``), on any engine.

What differs: schedkit keeps inter-token gaps per arm, not per request, so ``itls`` holds
an empty list per request and the ``itl`` statistics come from every gap of the arm
(``schedkit_note`` says so). ``request_goodput`` is the requests meeting every SLO target
per second (vLLM's ``--goodput``), None without targets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.bench.results import Results, percentile_key
from schedkit.bench.stats.estimators import FloatArray
from schedkit.bench.stats.request_table import RequestTable
from schedkit.records import RunResult

__all__ = ["dumps_indented", "vllm_bench_result", "write_vllm_bench"]

NOTE = (
    "written by schedkit: itls are kept per arm, not per request, so each request's list is"
    " empty and the itl statistics come from every inter-token gap of the arm"
)


def _stats(
    name: str, values_ms: FloatArray, percentiles: Sequence[float], out: dict[str, Any]
) -> None:
    values = values_ms if values_ms.size else np.zeros(1)
    out[f"mean_{name}_ms"] = float(values.mean())
    out[f"median_{name}_ms"] = float(np.median(values))
    out[f"std_{name}_ms"] = float(values.std())
    for q in percentiles:
        out[f"{percentile_key(q)}_{name}_ms"] = float(np.percentile(values, q))


def _weighted_stats(
    name: str, gaps: Sequence[tuple[float, int]], percentiles: Sequence[float], out: dict[str, Any]
) -> None:
    """``_stats`` of inter-token gaps given as (seconds, how many tokens had it)."""
    if not gaps:
        _stats(name, np.zeros(0), percentiles, out)
        return
    values = np.array([g for g, _ in gaps], dtype=float) * 1e3
    weights = np.array([w for _, w in gaps], dtype=float)
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights) / weights.sum()
    mean = float(np.average(values, weights=weights))
    out[f"mean_{name}_ms"] = mean
    last = len(values) - 1
    median = min(last, int(np.searchsorted(cumulative, 0.5)))
    out[f"median_{name}_ms"] = float(values[median])
    out[f"std_{name}_ms"] = float(np.sqrt(np.average((values - mean) ** 2, weights=weights)))
    for q in percentiles:
        at = min(last, int(np.searchsorted(cumulative, q / 100.0)))
        out[f"{percentile_key(q)}_{name}_ms"] = float(values[at])


def _seconds(values_ms: FloatArray) -> list[float]:
    """Latencies in ms as vLLM's seconds, 0.0 where there is none."""
    none = np.isnan(values_ms) | (values_ms == 0.0)  # as ``(ms or 0.0) / 1e3``: never -0.0
    seconds: list[float] = (np.where(none, 0.0, values_ms) / 1e3).tolist()
    return seconds


def _per_request(table: RequestTable) -> dict[str, list[Any]]:
    """vLLM's per-request lists, in workload order (seconds; 0.0 and an error's text for
    a request that did not complete)."""
    records = table.records
    done = table.completed.tolist()
    return {
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": np.where(table.completed, table.output_tokens, 0).tolist(),
        "ttfts": _seconds(table.ttft_ms),
        "itls": [[] for _ in records],
        "latencies": _seconds(table.e2e_ms),
        "start_times": [r.arrival_s for r in records],
        "errors": [
            "" if ok else (r.reject_reason or r.finish_reason or "unfinished")
            for r, ok in zip(records, done, strict=True)
        ],
    }


def vllm_bench_result(
    run: RunResult,
    results: Results,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    table: RequestTable | None = None,
) -> dict[str, Any]:
    """``run`` (one arm of ``results``) as ``vllm bench serve`` would have saved it;
    ``table``: ``run``'s :class:`RequestTable`, when built already."""
    records = run.records
    table = table if table is not None else RequestTable.of(run)
    spec, engine = results.provenance.spec, results.engine
    duration = run.duration_s
    done = int(np.count_nonzero(table.completed))
    arrivals = table.arrival_s
    span = float(arrivals.max() - arrivals.min()) if arrivals.size else 0.0
    total_in = int(table.prompt_tokens[table.completed].sum())
    total_out = int(table.output_tokens[table.completed].sum())
    met = int(np.count_nonzero(table.met_slo(slo_ttft_ms, slo_tpot_ms)))
    applies = table.slo_applies(slo_ttft_ms, slo_tpot_ms)
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": f"schedkit-{engine.get('engine', 'sim')}",
        "label": run.policy,
        "model_id": engine.get("model"),
        "tokenizer_id": None,
        "num_prompts": len(records),
        # as vLLM writes it: a number, or "inf" when every request was sent at once
        "request_rate": len(records) / span
        if span > 0 and not results.workload.all_at_once
        else "inf",
        "burstiness": spec.get("burstiness", 1.0),
        "max_concurrency": results.workload.max_concurrency,
        "duration": duration,
        "completed": done,
        "failed": len(records) - done,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": done / duration if duration > 0 else 0.0,
        "request_goodput": met / duration if applies and duration > 0 else None,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
        **_per_request(table),
        "workload": results.workload.name,
        "schedkit_note": NOTE,
    }
    _latency_stats(run, table, spec.get("stats", {}), out)
    return out


def _latency_stats(
    run: RunResult, table: RequestTable, stats: dict[str, Any], out: dict[str, Any]
) -> None:
    """vLLM's ``mean_``/``median_``/``std_``/``p<q>_`` of each latency, into ``out``."""
    asked = stats.get("percentile_metrics", ["ttft", "tpot", "itl"])
    qs = stats.get("metric_percentiles", [99.0])

    def percentiles(name: str) -> list[float]:  # p99 of every metric, as files had before
        return list(dict.fromkeys([*(qs if name in asked else []), 99.0]))

    for name, key in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", ""), ("e2el", "e2e_ms")):
        if name == "itl":  # vLLM's order
            _weighted_stats(name, run.itl, percentiles(name), out)
        else:
            values = table.latency(key)
            _stats(name, values[~np.isnan(values)], percentiles(name), out)


def write_vllm_bench(
    directory: Path,
    results: Results,
    runs: Sequence[RunResult],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    tables: Sequence[RequestTable] | None = None,
) -> list[Path]:
    """``vllm-bench-<arm>.json`` per arm in ``directory``; ``tables``: the arms'
    :class:`RequestTable`, when built already."""
    written = []
    for index, run in enumerate(runs):
        safe = "".join(c if c.isalnum() or c in "._+-" else "_" for c in run.policy)
        path = directory / f"vllm-bench-{index}-{safe}.json"
        table = tables[index] if tables is not None else None
        data = vllm_bench_result(
            run, results, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, table=table
        )
        path.write_text(dumps_indented(data), encoding="utf-8")
        written.append(path)
    return written


def dumps_indented(data: Mapping[str, Any]) -> str:
    """``json.dumps(data, indent=1)``, the same text, with the long per-request lists
    written by C code: json's indenting encoder is pure Python, one call per element.

    A value at depth 1 is its own ``json.dumps(..., indent=1)`` with every line after the
    first indented one more (JSON text has newlines only between tokens); a list of
    numbers is ``json.dumps`` of it, one number a line; a list of strings, each string
    encoded as json encodes it; a list of empty lists, ``[]`` a line.
    """
    if not data or not all(isinstance(key, str) for key in data):
        return json.dumps(data, indent=1)
    items = [f"{json.dumps(key)}: {_dump_value(value)}" for key, value in data.items()]
    return "{\n " + ",\n ".join(items) + "\n}"


def _dump_value(value: Any) -> str:
    """``value`` as ``json.dumps(data, indent=1)`` writes it at depth 1."""
    if isinstance(value, list) and value:
        kinds = set(map(type, value))
        if kinds <= {int, float}:  # numbers hold no ", ": the compact text splits on it
            return "[\n  " + json.dumps(value)[1:-1].replace(", ", ",\n  ") + "\n ]"
        if kinds == {str}:
            return "[\n  " + ",\n  ".join(map(encode_basestring_ascii, value)) + "\n ]"
        if kinds == {list} and not any(value):
            return "[\n  " + ",\n  ".join(["[]"] * len(value)) + "\n ]"
    return json.dumps(value, indent=1).replace("\n", "\n ")
