"""What scattered KV slots cost SGLang's torch-native decode attention on CPU.

SGLang's decode steps on CPU slow as an engine ages, with the radix cache on or off
(``aging.py``). Its torch-native backend gathers each request's keys and values from the
token pool by slot index (``k_cache[req_to_token[...]]``) and runs attention request by
request. A new engine hands out slots in order; once freed slots are reused, a request's
slots are spread over the pool. This times that per-request gather and attention for one
decode step (8 requests of 120 tokens, the 43M model's 6 layers of 12 heads of 64, a
16,384-token pool, bf16, one thread) with the slots laid out three ways.

    taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/kv_gather.py
"""

from __future__ import annotations

import time

import torch

POOL, HEADS, HEAD_DIM, LAYERS = 16_384, 12, 64, 6
REQUESTS, PROMPT, OUTPUT = 8, 96, 24
REPEATS = 200


def layouts() -> dict[str, list[torch.Tensor]]:
    """Slot indices per request: in order, prompts in order with the outputs of the 8
    requests interleaved (one slot each per decode step), and spread over the pool."""
    n = PROMPT + OUTPUT
    spread = torch.randperm(POOL, generator=torch.Generator().manual_seed(0))
    return {
        "in order": [torch.arange(i * n, (i + 1) * n) for i in range(REQUESTS)],
        "outputs interleaved": [
            torch.cat(
                [
                    torch.arange(i * PROMPT, (i + 1) * PROMPT),
                    REQUESTS * PROMPT + torch.arange(OUTPUT) * REQUESTS + i,
                ]
            )
            for i in range(REQUESTS)
        ],
        "spread over the pool": [spread[i * n : (i + 1) * n] for i in range(REQUESTS)],
    }


def main() -> None:
    torch.set_num_threads(1)
    k = [torch.randn(POOL, HEADS, HEAD_DIM).to(torch.bfloat16) for _ in range(LAYERS)]
    v = [torch.randn(POOL, HEADS, HEAD_DIM).to(torch.bfloat16) for _ in range(LAYERS)]
    q = torch.randn(1, HEADS, 1, HEAD_DIM).to(torch.bfloat16)

    def step(slots: list[torch.Tensor]) -> None:
        for layer in range(LAYERS):
            for idx in slots:  # as TorchNativeAttnBackend._run_sdpa_forward_decode
                key = k[layer][idx].movedim(0, 1).unsqueeze(0)
                value = v[layer][idx].movedim(0, 1).unsqueeze(0)
                torch.nn.functional.scaled_dot_product_attention(q, key, value)

    base = None
    for name, slots in layouts().items():
        step(slots)
        started = time.perf_counter()
        for _ in range(REPEATS):
            step(slots)
        ms = (time.perf_counter() - started) / REPEATS * 1e3
        base = base or ms
        print(f"{name:<22} {ms:6.2f} ms per decode step's attention ({ms / base:.2f}x)")


if __name__ == "__main__":
    main()
