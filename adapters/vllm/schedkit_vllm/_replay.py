"""What the twin and the real-engine bench share: trace requests as vLLM inputs.

A trace request becomes prompt token ids (shared where the trace says prompts share a
prefix, unique otherwise), sampling parameters that stop at exactly the trace's output
length, and a ``RequestRecord`` filled the way the simulator fills it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from schedkit.bench.records import RequestRecord
from schedkit.sim.workloads import TraceRequest

_SHARED_BASE = 1 << 60  # shared-prefix token ids live above every unique one
_UNIQUE_SHIFT = 32  # unique ids: (request index + 1) << 32 | position


def new_record(trace: TraceRequest) -> RequestRecord:
    """The record the simulator would start for ``trace`` (``SimRequest.from_trace``)."""
    return RequestRecord(
        request_id=trace.request_id,
        tenant=trace.tenant,
        priority=trace.priority,
        arrival_s=trace.arrival_s,
        prompt_tokens=max(1, trace.prompt_tokens),
        max_tokens=max(1, trace.output_tokens),
        slo_ttft_ms=trace.slo_ttft_ms,
        slo_tpot_ms=trace.slo_tpot_ms,
    )


def shared_prefix_tokens(trace: TraceRequest, block_size: int, hash_block_tokens: int) -> int:
    """Prompt tokens the trace marks as shareable: whole engine blocks, as the simulator
    counts them (``SimRequest.num_shared``); 0 when the trace has no usable hash ids."""
    if not (hash_block_tokens > 0 and hash_block_tokens % block_size == 0 and trace.hash_ids):
        return 0
    blocks = min(
        len(trace.hash_ids) * (hash_block_tokens // block_size),
        max(1, trace.prompt_tokens) // block_size,
    )
    return blocks * block_size


def prompt_token_ids(
    trace: TraceRequest,
    index: int,
    block_size: int,
    hash_block_tokens: int,
    vocab_size: int | None = None,
) -> list[int]:
    """Token ids for ``trace``: equal across requests for the blocks of equal hash ids,
    distinct elsewhere. With ``vocab_size`` (a real model) ids are mixed into range."""
    n = max(1, trace.prompt_tokens)
    shared = shared_prefix_tokens(trace, block_size, hash_block_tokens)
    ids = [0] * n
    for p in range(shared):
        h = trace.hash_ids[p // hash_block_tokens]
        zigzag = 2 * h if h >= 0 else -2 * h - 1
        ids[p] = _SHARED_BASE + zigzag * hash_block_tokens + p % hash_block_tokens
    base = (index + 1) << _UNIQUE_SHIFT
    for p in range(shared, n):
        ids[p] = base | p
    if vocab_size is not None:
        ids = [in_vocab(t, vocab_size) for t in ids]
    return ids


def output_token_id(index: int, position: int, vocab_size: int | None = None) -> int:
    """The token the twin 'samples' at ``position``: unique to the request."""
    token = ((index + 1) << _UNIQUE_SHIFT) | position
    return in_vocab(token, vocab_size) if vocab_size is not None else token


def in_vocab(token: int, vocab_size: int) -> int:
    """A well-mixed id in ``[8, vocab_size)`` (splitmix64), avoiding special tokens."""
    z = (token + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return 8 + z % max(1, vocab_size - 8)


def extra_args(trace: TraceRequest) -> dict[str, Any]:
    """Tenant and SLO targets as the adapter reads them (``vllm_xargs``)."""
    args: dict[str, Any] = {"tenant": trace.tenant}
    if trace.slo_ttft_ms is not None:
        args["slo_ttft_ms"] = trace.slo_ttft_ms
    if trace.slo_tpot_ms is not None:
        args["slo_tpot_ms"] = trace.slo_tpot_ms
    return args


_CONFIG_DIRS: dict[int, Path] = {}


def stub_model_dir(max_model_len: int) -> Path:
    """A directory holding only a tiny Llama ``config.json``: enough for vLLM's
    ``ModelConfig`` when no model runs (the twin). One per length, per process."""
    path = _CONFIG_DIRS.get(max_model_len)
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="schedkit-vllm-twin-"))
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 32000,
            "max_position_embeddings": max_model_len,
            "torch_dtype": "float32",
        }
        (path / "config.json").write_text(json.dumps(config))
        _CONFIG_DIRS[max_model_len] = path
    return path
