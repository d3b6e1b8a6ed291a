"""The simulator against published end-to-end GPU figures it was not fitted to (issue #41).

Each row of ``published-figures.toml`` is one figure from a benchmark table or paper
(single-request latency or speed, inter-token latency at a batch, TTFT at a prompt
length, a fixed batch's latency or throughput), with its source and conditions. This
script replays the same requests through schedkit's simulated engine, all arriving at
once, under the engine defaults the row names (else vLLM V1's: 256 sequences, 8,192
batched tokens, chunked prefill; prefix caching off, as the benchmarks' random prompts
share nothing), once with the roofline (70% of peak FLOP/s, 85% of bandwidth, 0.5 ms a
step) and once with the per-operator model, and prints the error of each against the
published figure.

    .venv/bin/python benchmarks/fidelity/published.py --json benchmarks/fidelity/published.json

No figure here was used to fit the model: the operator curves come from Vidur's kernel
tables (``fit_operators.py``); the rows are end-to-end measurements on real engines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from pathlib import Path
from typing import Any

from schedkit import PolicyFacade
from schedkit.records import RequestRecord
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import StepCostModel
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.operators import OperatorCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model, kv_capacity_tokens, load_profile_file
from schedkit.sim.engine import SimEngine
from schedkit.workload import TraceRequest

HERE = Path(__file__).parent
FIGURES = HERE / "published-figures.toml"
MODELS = {  # a published model name -> the schedkit profile of its shape
    "llama-3-8b": "Llama-3-8B",
    "llama-3.1-8b": "Llama-3-8B",
    "llama-3-70b": "Llama-3-70B",
    "llama-3.1-70b": "Llama-3-70B",
    "qwen2.5-7b": "Qwen2.5-7B",
    "qwen2.5-14b": "Qwen2.5-14B",
    "qwen2.5-32b": "Qwen2.5-32B",
    "qwen2.5-72b": "Qwen2.5-72B",
}
COSTS = ("roofline", "operators")


def profile_name(published: str) -> str:
    """``"meta-llama/Llama-3.1-8B-Instruct"`` -> ``"Llama-3-8B"``."""
    key = published.rsplit("/", 1)[-1].lower().replace("meta-", "").removesuffix("-instruct")
    key = key.replace("llama v", "llama-").replace(" ", "-")  # TensorRT-LLM's "LLaMA v3.1 8B"
    if key not in MODELS:
        raise SystemExit(f"no schedkit profile for the published model {published!r}")
    return MODELS[key]


def simulate(row: dict[str, Any], cost: StepCostModel, config: SimConfig) -> list[RequestRecord]:
    """The row's requests, all arriving at 0 (``batch_size`` of them, or ``num_prompts``)."""
    n = int(row.get("num_prompts") or row.get("batch_size") or 1)
    requests = [
        TraceRequest(f"r{i}", 0.0, int(row["prompt_tokens"]), int(row["output_tokens"]))
        for i in range(n)
    ]
    return SimEngine(requests, cost, config, PolicyFacade([])).run().records


def measure(row: dict[str, Any], records: list[RequestRecord]) -> float:
    """The row's metric, in its unit, from the simulated requests."""
    kind = row["kind"]
    out = int(row["output_tokens"])
    first = [r.first_token_s - r.arrival_s for r in records]  # type: ignore[operator]
    done = [r.finish_s - r.arrival_s for r in records]  # type: ignore[operator]
    if kind == "ttft":
        seconds = statistics.mean(first)
    elif kind in ("tpot_at_batch", "itl_at_batch"):
        seconds = statistics.mean((d - f) / (out - 1) for d, f in zip(done, first, strict=True))
    elif kind in ("single_request_latency", "batch_latency"):
        seconds = max(done)
    elif kind == "single_request_speed":
        return out / max(done)
    elif kind == "offline_throughput":
        return len(records) * out / max(done)  # output tokens a second
    else:
        raise SystemExit(f"row {row['id']}: unknown kind {kind!r}")
    return seconds * 1e3 if row["unit"] == "ms" else seconds


def overlaps_cpu(row: dict[str, Any]) -> bool:
    """Whether the row's engine runs its CPU work during the GPU's: vLLM's async
    scheduling, its GPU default in 0.32-0.34 (ENGINES.md), does; the vLLM of these rows,
    0.6 and earlier (V0), did not (0.6's async output processing overlaps only part of
    it). TensorRT-LLM 0.13's C++ executor is taken to overlap it."""
    if row["engine"] != "vLLM":
        return True
    version = row["engine_version"] or "0.5"  # LLM-Inference-Bench: about 0.5 (its API)
    major_minor = tuple(int(v) for v in version.split(".")[:2])
    if (0, 6) < major_minor < (0, 32):
        raise SystemExit(f"row {row['id']}: vLLM {version}: whether it overlaps is not known")
    return major_minor >= (0, 32)


def predict(row: dict[str, Any], cost_name: str) -> float:
    model, gpu, tp = profile_name(row["model"]), get_gpu(row["gpu"]), int(row["num_gpus"])
    shape = get_model(model)
    if cost_name == "operators":
        cost: StepCostModel = OperatorCostModel(shape, gpu, tp, async_scheduling=overlaps_cpu(row))
    else:
        cost = RooflineCostModel(shape, gpu, tp)
    utilisation = float(row.get("gpu_memory_utilization", 0.9))
    block = 16
    config = SimConfig(
        num_blocks=kv_capacity_tokens(shape, gpu, tp, utilisation) // block,
        block_size=block,
        max_num_seqs=int(row.get("max_num_seqs", 256)),
        max_num_batched_tokens=int(row.get("max_num_batched_tokens", 8192)),
        enable_prefix_caching=False,
    )
    return measure(row, simulate(row, cost, config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and errors here")
    args = parser.parse_args()
    load_profile_file(HERE / "costmodel-qwen2.5-large.toml")
    rows = tomllib.loads(args.figures.read_text())["figure"]
    results = []
    header = f"{'id':<34} {'model':<14} {'gpu':<9} {'tp':>2} {'published':>12} {'roofline':>16} {'operators':>16}"
    print(header)
    for row in rows:
        value = float(row["value"])
        result = {"id": row["id"], "published": value, "unit": row["unit"]}
        cells = []
        for name in COSTS:
            predicted = predict(row, name)
            error = predicted / value - 1.0
            result[name] = {"predicted": round(predicted, 4), "error_pct": round(100 * error, 1)}
            cells.append(f"{predicted:>8.4g} {100 * error:>+6.1f}%")
        results.append(result)
        model = profile_name(row["model"])
        print(
            f"{row['id']:<34} {model:<14} {row['gpu']:<9} {row['num_gpus']:>2}"
            f" {value:>8.4g} {row['unit']:<3} {cells[0]:>16} {cells[1]:>16}"
        )
    for name in COSTS:
        errors = [abs(r[name]["error_pct"]) for r in results]  # type: ignore[index]
        within = sum(e <= 15.0 for e in errors)
        print(
            f"{name}: median |error| {statistics.median(errors):.1f}%, max {max(errors):.1f}%,"
            f" {within}/{len(errors)} rows within 15%"
        )
    if args.json is not None:
        document = {"figures": str(args.figures.name), "rows": results}
        args.json.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
