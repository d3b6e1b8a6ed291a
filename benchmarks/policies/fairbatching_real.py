"""fairbatching against fcfs on the real vLLM CPU engine (tiny random-weight Llama) and on
the simulator reading the same model: interactive requests decoding when a burst of long
prompts arrives (the plugin's test, sized for this CPU; see fairbatching.md).

A random-weight Llama (hidden size 768, 6 layers: ``tiers_real.py``'s). Per seed: 8
interactive requests at 0 s (prompt 64, output 60; targets TTFT 1 s and TPOT
``--tpot-ms``, 30), then at 0.1 s a burst of 48 prompts of 400 tokens (output 4; TTFT
target 20 s). ``--max-num-seqs 64 --max-num-batched-tokens 2048``: under fcfs
(stall-free) the burst's prefill fills every step beside the decodes. Seeds jitter the
burst's arrivals. Prints, per arm, the interactive requests' worst and mean TPOT and the
burst's p90 TTFT; writes ``summary.json``. Run from the repository root:

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/fairbatching_real.py \\
        --out /tmp/sk/fairbatching-real
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
from real_engine import bench
from tiers_real import MID  # the same random-weight Llama

from schedkit.testing.models import tiny_llama

ENGINE_ARGS = ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]


def rows(seed: int, tpot_ms: float) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [
        {"request_id": f"chat-{i}", "arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 60,
         "slo_ttft_ms": 1000, "slo_tpot_ms": tpot_ms}
        for i in range(8)
    ]  # fmt: skip
    out += [
        {"request_id": f"burst-{i:02d}", "arrival_s": round(0.1 + rng.uniform(0, 0.01), 4),
         "prompt_tokens": 400, "output_tokens": 4, "slo_ttft_ms": 20_000}
        for i in range(48)
    ]  # fmt: skip
    return sorted(out, key=lambda r: r["arrival_s"])


def figures(out: Path) -> dict[str, dict[str, float]]:
    with (out / "requests.csv").open() as f:
        rows_ = list(csv.DictReader(f))
    arms: dict[str, dict[str, float]] = {}
    for arm in sorted({r["arm"] for r in rows_}):
        chat = [
            float(r["tpot_ms"])
            for r in rows_
            if r["arm"] == arm and r["request_id"].startswith("chat")
        ]
        burst = sorted(float(r["ttft_ms"]) for r in rows_
                       if r["arm"] == arm and r["request_id"].startswith("burst"))  # fmt: skip
        arms[arm] = {"chat_tpot_max_ms": round(max(chat), 1),
                     "chat_tpot_mean_ms": round(sum(chat) / len(chat), 1),
                     "burst_ttft_p90_ms": round(burst[int(0.9 * (len(burst) - 1))], 1)}  # fmt: skip
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/fairbatching-real"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--engines", nargs="+", default=["vllm", "sim"])
    parser.add_argument("--tpot-ms", type=float, default=30.0, help="the interactive TPOT target")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fairbatching-real-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", vocab_size=512, max_position_embeddings=1024, **MID)
        for seed in args.seeds:
            workload = tmp / f"burst-s{seed}.jsonl"
            workload.write_text("".join(json.dumps(r) + "\n" for r in rows(seed, args.tpot_ms)))
            for engine in args.engines:
                out = args.out / f"{engine}-s{seed}"
                bench(["--engine", engine, "--model", str(model), "--workload", str(workload),
                       *ENGINE_ARGS, "--policy", "fcfs", "--policy", "fairbatching"], out)  # fmt: skip
                summary[f"{engine}/s{seed}"] = figures(out)
                print(f"{engine}/s{seed}", json.dumps(summary[f"{engine}/s{seed}"]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
