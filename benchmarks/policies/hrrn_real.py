"""hrrn against fcfs on the real vLLM CPU engine (tiny random-weight Llama) and on the
simulator: the burst of ``real_engine.py``'s sjf proof (60 requests with spread lengths,
``--max-num-seqs 2`` so they queue), seeds 0-2. Prints TTFT p50/p90/mean per arm and
writes ``summary.json``; run from the repository root:

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/hrrn_real.py \\
        --out /tmp/sk/hrrn-real
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from real_engine import SJF_WORKLOAD, arm_metrics, bench

from schedkit.testing.models import VLLM_CPU, tiny_llama


def run(engine: str, model: Path, seed: int, out: Path) -> dict[str, Any]:
    res = bench(
        ["--engine", engine, "--model", str(model), "--workload", SJF_WORKLOAD,
         "--seed", str(seed), "--max-num-seqs", "2", "--policy", "fcfs", "--policy", "hrrn"],
        out / f"hrrn-{engine}-s{seed}",
    )  # fmt: skip
    comparison = res["comparisons"][0]["summary"]
    arms = {
        name: {q: round(m["ttft_ms"][q], 1) for q in ("p50", "p90", "mean")}
        for name, m in arm_metrics(res).items()
    }
    return {"arms": arms, "verdict": comparison}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/hrrn-real"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tiny-llama-") as tmp:
        model = tiny_llama(Path(tmp) / "tiny-llama", **VLLM_CPU)
        for engine in ("vllm", "sim"):
            for seed in args.seeds:
                key = f"{engine}/s{seed}"
                summary[key] = run(engine, model, seed, args.out)
                print(key, json.dumps(summary[key]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
