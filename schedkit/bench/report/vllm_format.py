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
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.bench.results import Results, percentile_key
from schedkit.bench.stats.metrics import (
    is_completed,
    latencies_ms,
    meets_slo,
    slo_applies,
)
from schedkit.records import RequestRecord, RunResult

__all__ = ["vllm_bench_result", "write_vllm_bench"]

NOTE = (
    "written by schedkit: itls are kept per arm, not per request, so each request's list is"
    " empty and the itl statistics come from every inter-token gap of the arm"
)


def _stats(
    name: str, values_ms: Sequence[float], percentiles: Sequence[float], out: dict[str, Any]
) -> None:
    values = np.asarray(values_ms or [0.0], dtype=float)
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
        _stats(name, [], percentiles, out)
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


def _per_request(
    records: Sequence[RequestRecord], lats: Sequence[dict[str, float | None]]
) -> dict[str, list[Any]]:
    """vLLM's per-request lists, in workload order (seconds; 0.0 and an error's text for
    a request that did not complete)."""
    return {
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": [r.output_tokens if is_completed(r) else 0 for r in records],
        "ttfts": [(lat["ttft_ms"] or 0.0) / 1e3 for lat in lats],
        "itls": [[] for _ in records],
        "latencies": [(lat["e2e_ms"] or 0.0) / 1e3 for lat in lats],
        "start_times": [r.arrival_s for r in records],
        "errors": [
            "" if is_completed(r) else (r.reject_reason or r.finish_reason or "unfinished")
            for r in records
        ],
    }


def vllm_bench_result(
    run: RunResult,
    results: Results,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> dict[str, Any]:
    """``run`` (one arm of ``results``) as ``vllm bench serve`` would have saved it."""
    records = run.records
    spec, engine = results.provenance.spec, results.engine
    duration = run.duration_s
    done = [r for r in records if is_completed(r)]
    lats = [latencies_ms(r) for r in records]
    span = max((r.arrival_s for r in records), default=0.0) - min(
        (r.arrival_s for r in records), default=0.0
    )
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    met = sum(meets_slo(r, slo_ttft_ms, slo_tpot_ms) for r in records)
    applies = slo_applies(records, slo_ttft_ms, slo_tpot_ms)
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
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration if duration > 0 else 0.0,
        "request_goodput": met / duration if applies and duration > 0 else None,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
        **_per_request(records, lats),
        "workload": results.workload.name,
        "schedkit_note": NOTE,
    }
    stats = spec.get("stats", {})
    asked = stats.get("percentile_metrics", ["ttft", "tpot", "itl"])
    qs = stats.get("metric_percentiles", [99.0])

    def percentiles(name: str) -> list[float]:  # p99 of every metric, as files had before
        return list(dict.fromkeys([*(qs if name in asked else []), 99.0]))

    for name, key in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", ""), ("e2el", "e2e_ms")):
        if name == "itl":  # vLLM's order
            _weighted_stats(name, run.itl, percentiles(name), out)
        else:
            _stats(name, [v for lat in lats if (v := lat[key]) is not None], percentiles(name), out)
    return out


def write_vllm_bench(
    directory: Path,
    results: Results,
    runs: Sequence[RunResult],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> list[Path]:
    """``vllm-bench-<arm>.json`` per arm in ``directory``."""
    written = []
    for index, run in enumerate(runs):
        safe = "".join(c if c.isalnum() or c in "._+-" else "_" for c in run.policy)
        path = directory / f"vllm-bench-{index}-{safe}.json"
        data = vllm_bench_result(run, results, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms)
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
        written.append(path)
    return written
