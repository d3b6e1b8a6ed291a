"""tlru against LRU (the engines' own eviction) on the real vLLM CPU engine (tiny
random-weight Llama) and on the simulator reading the same model: conversations whose
next turns come back after floods of one-off prompts that overflow the KV cache (see
tlru.md, "On a real CPU engine").

Per seed: 3 conversations of 3 turns; turn ``t`` (``t`` = 0, 1, 2) arrives at ``4t`` s
and resends the conversation so far, ``4(t+1)`` blocks of 32 tokens, plus 16 tokens of
its own. Between turns, 40 one-off prompts of 3 blocks (+8 tokens) arrive over about a
second, each with blocks of its own. Output 4 tokens each; ``--num-gpu-blocks-override 120`` (1,920
tokens, 60 of vLLM's 32-token blocks): the one-offs alone overflow it. Arms: ``fcfs``
(LRU eviction) and ``tlru-real.toml`` (``xi_tokens`` 256, ``next_prompt_tokens`` 64: a
one-off is all safe; a 12-block conversation keeps its first 6 blocks). Seeds move the
one-offs' arrivals. Prints, per arm, the tokens later turns found cached and their TTFT,
and the prefix hit rate overall; writes ``summary.json``. Run from the repository root:

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/tlru_real.py \\
        --out /tmp/sk/tlru-real
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from real_engine import arm_metrics, bench

from schedkit.testing.models import VLLM_CPU, tiny_llama

ARMS = ["fcfs", "benchmarks/policies/tlru-real.toml"]
ENGINE_ARGS = ["--max-num-seqs", "4", "--num-gpu-blocks-override", "120"]
BLOCK, TURNS, CONVERSATIONS, ONE_OFFS = 32, 3, 3, 40


def rows(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for t in range(TURNS):
        for c in range(CONVERSATIONS):
            blocks = 4 * (t + 1)
            out.append({"request_id": f"c{c}-turn{t}", "arrival_s": 4.0 * t + 0.1 * c,
                        "prompt_tokens": BLOCK * blocks + 16, "output_tokens": 4,
                        "hash_ids": [1000 * (c + 1) + k for k in range(blocks)]})  # fmt: skip
        if t + 1 < TURNS:
            for i in range(ONE_OFFS):
                n = len(out)
                out.append({"request_id": f"one-off-{t}-{i:02d}",
                            "arrival_s": round(4.0 * t + 1.0 + 0.025 * i + rng.uniform(0, 0.02), 4),
                            "prompt_tokens": BLOCK * 3 + 8, "output_tokens": 4,
                            "hash_ids": [100_000 + 3 * n + k for k in range(3)]})  # fmt: skip
    return sorted(out, key=lambda r: r["arrival_s"])


def later_turns(out: Path) -> dict[str, dict[str, float]]:
    """Per arm: mean cached tokens and mean TTFT of turns 1 and 2."""
    with (out / "requests.csv").open() as f:
        turns = [r for r in csv.DictReader(f) if "-turn" in r["request_id"]
                 and not r["request_id"].endswith("turn0")]  # fmt: skip
    arms: dict[str, dict[str, float]] = {}
    for arm in sorted({r["arm"] for r in turns}):
        mine = [r for r in turns if r["arm"] == arm]
        arms[arm] = {
            "turns_cached_tokens": sum(int(r["cached_tokens"]) for r in mine) / len(mine),
            "turns_ttft_ms": sum(float(r["ttft_ms"]) for r in mine) / len(mine),
        }
    return arms


def run(engine: str, model: Path, workload: Path, out: Path) -> dict[str, Any]:
    args = ["--engine", engine, "--model", str(model), "--workload", str(workload), *ENGINE_ARGS]
    for arm in ARMS:
        args += ["--policy", arm]
    res = bench(args, out)
    turns = later_turns(out)
    return {
        name: {"prefix_hit_rate": round(m["prefix_hit_rate"], 4),
               **{k: round(v, 1) for k, v in turns.get(name, {}).items()}}
        for name, m in arm_metrics(res).items()
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/tlru-real"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--engines", nargs="+", default=["vllm", "sim"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tlru-real-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "tiny-llama", **VLLM_CPU)
        for seed in args.seeds:
            workload = tmp / f"turns-s{seed}.jsonl"
            header = {"workload": {"name": "turns-and-floods", "hash_block_tokens": BLOCK}}
            lines = [header, *rows(seed)]
            workload.write_text("".join(json.dumps(row) + "\n" for row in lines))
            for engine in args.engines:
                key = f"{engine}/s{seed}"
                summary[key] = run(engine, model, workload, args.out / f"{engine}-s{seed}")
                print(key, json.dumps(summary[key]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
