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
``e2el`` ``_ms`` over completed requests, as vLLM computes them.

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

from schedkit.bench.results import Results
from schedkit.bench.stats.metrics import is_completed, latencies_ms, meets_slo, slo_applies
from schedkit.records import RunResult

__all__ = ["vllm_bench_result", "write_vllm_bench"]

NOTE = (
    "written by schedkit: itls are kept per arm, not per request, so each request's list is"
    " empty and the itl statistics come from every inter-token gap of the arm"
)


def _stats(name: str, values_ms: Sequence[float], out: dict[str, Any]) -> None:
    values = np.asarray(values_ms or [0.0], dtype=float)
    out[f"mean_{name}_ms"] = float(values.mean())
    out[f"median_{name}_ms"] = float(np.median(values))
    out[f"std_{name}_ms"] = float(values.std())
    out[f"p99_{name}_ms"] = float(np.percentile(values, 99))


def _weighted_stats(name: str, gaps: Sequence[tuple[float, int]], out: dict[str, Any]) -> None:
    """``_stats`` of inter-token gaps given as (seconds, how many tokens had it)."""
    if not gaps:
        _stats(name, [], out)
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
    p99 = min(last, int(np.searchsorted(cumulative, 0.99)))
    out[f"median_{name}_ms"] = float(values[median])
    out[f"std_{name}_ms"] = float(np.sqrt(np.average((values - mean) ** 2, weights=weights)))
    out[f"p99_{name}_ms"] = float(values[p99])


def vllm_bench_result(
    run: RunResult,
    results: Results,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> dict[str, Any]:
    """``run`` (one arm of ``results``) as ``vllm bench serve`` would have saved it."""
    records = run.records
    spec, engine = results.provenance.spec, results.engine  # a live run's --max-concurrency
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
        "request_rate": len(records) / span if span > 0 else float("inf"),
        "burstiness": spec.get("burstiness", 1.0),
        "max_concurrency": spec.get("live", {}).get("max_concurrency"),
        "duration": duration,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration if duration > 0 else 0.0,
        "request_goodput": met / duration if applies and duration > 0 else None,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
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
        "workload": results.workload.name,
        "schedkit_note": NOTE,
    }
    _stats("ttft", [v for lat in lats if (v := lat["ttft_ms"]) is not None], out)
    _stats("tpot", [v for lat in lats if (v := lat["tpot_ms"]) is not None], out)
    _weighted_stats("itl", run.itl, out)
    _stats("e2el", [v for lat in lats if (v := lat["e2e_ms"]) is not None], out)
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
