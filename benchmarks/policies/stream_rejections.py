"""Streamed rejections on vLLM's real OpenAI server: what a streaming client sees (trust.md).

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/policies/stream_rejections.py [--requests 500]

Builds the tiny random-weight Llama of ``adapters/vllm/tests`` and, for each arm, launches
vLLM with the ``slo`` policy (TTFT target 300 ms, ``prefill_tokens_per_s`` 2000, so a burst
overloads it) and sends ``--requests`` streamed ``/v1/completions`` at once (64-token
prompts, 8 tokens each; chat streams are checked by ``adapters/vllm/tests/test_server.py``).
Every stream is read to ``[DONE]`` and counted as
finished (a ``length`` finish), rejected with its reason (a final chunk with ``finish_reason``
``abort`` and ``stop_reason`` ``rejected: ...``), or ended with nothing (``[DONE]`` only).

- ``stock``: ``python -m vllm.entrypoints.openai.api_server --scheduler-cls
  schedkit_vllm.Scheduler --additional-config ...``, no
  schedkit middleware: vLLM's own stream generators (before issue #12 part 4);
- ``schedkit serve``: ``schedkit serve vllm``, whose trust middleware installs
  ``schedkit_vllm.streaming``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trust_real import served  # benchmarks/policies, this script's directory

from schedkit.testing.models import VLLM_CPU, tiny_llama

CONFIG: dict[str, object] = {
    "policy": ["slo"],
    "options": {"slo": {"ttft_ms": 300, "prefill_tokens_per_s": 2000}},
}


def outcome(base: str, model: Path, i: int) -> str:
    body = {
        "model": str(model),
        "prompt": [5 + i % 50] * 64,
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{base}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    finishes = []
    with urllib.request.urlopen(request, timeout=900) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line.removeprefix("data: "))["choices"]:
                if choice.get("finish_reason"):
                    finishes.append((choice["finish_reason"], choice.get("stop_reason")))
    if not finishes:
        return "[DONE] only"
    (reason, stop), *more = finishes
    if more:
        return "more than one finish"
    if reason == "abort" and str(stop).startswith("rejected: "):
        return "rejected, with reason"
    return reason


def run_arm(model: Path, tmp: Path, requests: int, stock: bool) -> Counter[str]:
    pool = ThreadPoolExecutor(max_workers=min(requests, 256))
    with served(model, CONFIG, tmp, stock=stock, seqs=8) as base, pool:
        return Counter(pool.map(lambda i: outcome(base, model, i), range(requests)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedkit-stream-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", **VLLM_CPU)
        arms = {
            "stock vLLM stream": run_arm(model, tmp, args.requests, stock=True),
            "schedkit serve vllm": run_arm(model, tmp, args.requests, stock=False),
        }
    kinds = sorted({k for counts in arms.values() for k in counts})
    print("| arm | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for arm, counts in arms.items():
        print(f"| {arm} | " + " | ".join(str(counts[k]) for k in kinds) + " |")


if __name__ == "__main__":
    main()
