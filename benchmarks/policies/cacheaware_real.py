"""cache-aware against fcfs on the real vLLM CPU engine (tiny random-weight Llama) and on
the simulator reading the same model: a burst of conversation turns whose prompts share
one of a few long prefixes, in a KV cache too small to keep them all (see
cache_aware_admission.md).

Per seed: ``--requests`` requests at 0 s, each from one of ``--groups`` (16)
conversations drawn at random (the seed's), prompt = the conversation's 256-token prefix +
64 tokens of its own, output 16; ``--max-num-seqs 8``, ``--num-gpu-blocks-override 320``
(5,120 tokens: the running batch holds about half, and the prefixes of about nine of the
sixteen conversations fit beside it).
Arms: fcfs, ``cache-aware`` (defaults: window 64, threshold 0.5) and
``cache-aware-t0.toml`` (threshold 0). Prints the prefix hit rate, request throughput and
TTFT p50/p90 per arm; writes ``summary.json``. Run from the repository root:

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/cacheaware_real.py \\
        --out /tmp/sk/cacheaware-real
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from real_engine import arm_metrics, bench

from schedkit.testing.models import VLLM_CPU, tiny_llama

ARMS = ["fcfs", "cache-aware", "benchmarks/policies/cache-aware-t0.toml"]
ENGINE_ARGS = ["--max-num-seqs", "8", "--num-gpu-blocks-override", "320"]
PREFIX_BLOCKS, BLOCK, OWN, OUTPUT = 8, 32, 64, 16


def write_burst(path: Path, n: int, groups: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = [{"workload": {"name": f"conversations-{groups}", "hash_block_tokens": BLOCK}}]
    for i in range(n):
        g = rng.randrange(groups)
        rows.append({"request_id": f"r{i:03d}", "arrival_s": 0.0,
                     "prompt_tokens": PREFIX_BLOCKS * BLOCK + OWN, "output_tokens": OUTPUT,
                     "hash_ids": [1000 * g + k for k in range(PREFIX_BLOCKS)]})  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run(engine: str, model: Path, workload: Path, out: Path) -> dict[str, Any]:
    args = ["--engine", engine, "--model", str(model), "--workload", str(workload), *ENGINE_ARGS]
    for arm in ARMS:
        args += ["--policy", arm]
    res = bench(args, out)
    return {
        name: {"prefix_hit_rate": round(m["prefix_hit_rate"], 4),
               "request_throughput_rps": round(m["request_throughput_rps"], 3),
               "ttft_p50_ms": round(m["ttft_ms"]["p50"], 1),
               "ttft_p90_ms": round(m["ttft_ms"]["p90"], 1)}
        for name, m in arm_metrics(res).items()
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/cacheaware-real"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--engines", nargs="+", default=["vllm", "sim"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cacheaware-real-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "tiny-llama", **VLLM_CPU)
        for seed in args.seeds:
            workload = tmp / f"burst-s{seed}.jsonl"
            write_burst(workload, args.requests, args.groups, seed)
            for engine in args.engines:
                key = f"{engine}/s{seed}"
                summary[key] = run(engine, model, workload, args.out / f"{engine}-s{seed}")
                print(key, json.dumps(summary[key]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
