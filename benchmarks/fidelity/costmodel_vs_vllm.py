"""The roofline against vLLM's published benchmark figures for Llama-3-8B (issue #15 part 5).

Each case replays, on the simulator with the shipped roofline profile (no calibration),
the shape of a benchmark whose result vLLM's CI or maintainers published, and prints the
simulated figure beside the published one. The requests of ``benchmark_latency`` and
``benchmark_throughput`` all arrive at once, as those scripts submit them; written as a
trace with one timestamp. Sources are in ``benchmarks/fidelity/costmodel.md``.

    python benchmarks/fidelity/costmodel_vs_vllm.py
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from schedkit.bench.runner import BenchSpec, run_bench


@dataclass(frozen=True)
class Case:
    name: str
    gpu: str
    requests: int
    prompt: int
    output: int
    metric: str  # "latency_ms": the batch's end-to-end time; "req_s"; "tpot_ms", "ttft_ms"
    published: float
    rate: float | None = None  # requests/s (Poisson); None: all at once
    chunked: int = 0  # max_num_batched_tokens under chunked prefill; 0: vLLM's default


CASES = (
    Case("CI latency, batch 8, 32 in / 128 out", "A100-80GB", 8, 32, 128, "latency_ms", 1579.27),
    Case("CI latency, batch 8, 32 in / 128 out", "H100-SXM", 8, 32, 128, "latency_ms", 997.54),
    Case("throughput, 1000 x 256 in / 256 out (PR 7117)", "H100-SXM", 1000, 256, 256,
         "req_s", 24.32),
    Case("serving, 10 QPS 60 s, 550 in / 150 out (PR 6883)", "H100-SXM", 600, 550, 150,
         "tpot_ms", 54.54, rate=10.0, chunked=512),
    Case("serving, 10 QPS 60 s, 550 in / 150 out (PR 6883)", "H100-SXM", 600, 550, 150,
         "ttft_ms", 269.01, rate=10.0, chunked=512),
)  # fmt: skip


def workload(case: Case, directory: Path) -> str:
    if case.rate is not None:
        return (
            f"poisson:rate={case.rate:g},n={case.requests},prompt=const:{case.prompt},"
            f"output=const:{case.output},seed=1"
        )
    path = directory / f"{case.requests}x{case.prompt}x{case.output}.csv"
    rows = [f"2024-01-01 00:00:00.0000000,{case.prompt},{case.output}"] * case.requests
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return str(path)


def simulated(case: Case, directory: Path) -> float:
    settings = {"max_num_batched_tokens": case.chunked} if case.chunked else {}
    out = directory / f"out-{abs(hash(case))}"
    spec = BenchSpec(
        workload=workload(case, directory), policies=["fcfs"], model="Llama-3-8B",
        gpu=case.gpu, **settings,
    )  # fmt: skip
    m = run_bench(spec, out)["arms"][0]["metrics"]
    if case.metric == "latency_ms":
        return float(m["e2e_ms"]["p50"])
    if case.metric == "req_s":
        return float(m["completed"] / m["duration_s"])
    return float(m[case.metric]["mean"])  # vLLM's serving benchmark reports the means


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("| benchmark | GPU | metric | vLLM published | roofline | roofline / vLLM |")
        print("|---|---|---|---:|---:|---:|")
        for case in CASES:
            value = simulated(case, Path(tmp))
            print(
                f"| {case.name} | {case.gpu} | {case.metric} | {case.published:,.2f} |"
                f" {value:,.2f} | {value / case.published:.2f}x |"
            )


if __name__ == "__main__":
    main()
