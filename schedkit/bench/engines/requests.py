"""Engine requests from trace requests: what every real-engine adapter builds the same way.

A trace request becomes prompt token ids (equal across requests where the trace says
prompts share a prefix, unique otherwise), per-request metadata for schedkit (tenant,
SLO targets) and a ``RequestRecord`` filled the way the simulator fills it. Real engines
also need the local model directory named by ``--model`` and requests that fit the
model's positions (``fit_traces``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from schedkit.errors import SchedkitError
from schedkit.records import RequestRecord
from schedkit.sim.request import record_of
from schedkit.workload import TraceRequest

__all__ = [
    "ModelInfo",
    "fit_traces",
    "in_vocab",
    "model_info",
    "new_record",
    "output_token_id",
    "prompt_token_ids",
    "request_metadata",
    "shared_prefix_tokens",
]

_SHARED_BASE = 1 << 60  # shared-prefix token ids live above every unique one
_UNIQUE_SHIFT = 32  # unique ids: (request index + 1) << 32 | position


def new_record(trace: TraceRequest) -> RequestRecord:
    """The record the simulator would start for ``trace`` (``SimRequest.from_trace``)."""
    return record_of(trace)


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
    """A token a model-less engine can 'sample' at ``position``: unique to the request."""
    token = ((index + 1) << _UNIQUE_SHIFT) | position
    return in_vocab(token, vocab_size) if vocab_size is not None else token


def in_vocab(token: int, vocab_size: int) -> int:
    """A well-mixed id in ``[8, vocab_size)`` (splitmix64), avoiding special tokens."""
    z = (token + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return 8 + z % max(1, vocab_size - 8)


def request_metadata(trace: TraceRequest) -> dict[str, Any]:
    """Tenant and SLO targets, the keys adapters read from a request's sampling
    parameters (vLLM's ``extra_args``, SGLang's ``custom_params``)."""
    args: dict[str, Any] = {"tenant": trace.tenant}
    if trace.slo_ttft_ms is not None:
        args["slo_ttft_ms"] = trace.slo_ttft_ms
    if trace.slo_tpot_ms is not None:
        args["slo_tpot_ms"] = trace.slo_tpot_ms
    return args


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a replay needs from the model directory's ``config.json``."""

    path: Path
    vocab_size: int
    max_positions: int


def model_info(model: str, engine: str) -> ModelInfo:
    """The local model directory named by ``--model`` for ``--engine engine``, or a
    ``SchedkitError`` saying what is missing."""
    path = Path(model).expanduser()
    config_file = path / "config.json"
    if not config_file.is_file():
        raise SchedkitError(
            f"--engine {engine} needs --model PATH to a local model directory (with"
            f" config.json); got {model!r}"
        )
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SchedkitError(f"cannot read {config_file}: {exc}") from exc
    text = config.get("text_config", config) if isinstance(config, dict) else {}
    vocab = int(text.get("vocab_size") or 0)
    positions = int(text.get("max_position_embeddings") or 0)
    if vocab <= 8 or positions <= 1:
        raise SchedkitError(
            f"{config_file} needs vocab_size and max_position_embeddings for --engine {engine}"
        )
    return ModelInfo(path.resolve(), vocab, positions)


def fit_traces(
    traces: Sequence[TraceRequest], max_positions: int
) -> tuple[int, list[TraceRequest], int]:
    """``(max_model_len, traces, clipped)``: the longest request's prompt + output + 1 (at
    most ``max_positions``), the traces with longer ones clipped (prompt first), and how
    many were clipped."""
    limit = max(2, max_positions)
    fitted: list[TraceRequest] = []
    clipped = 0
    longest = 1
    for t in traces:
        prompt, output = max(1, t.prompt_tokens), max(1, t.output_tokens)
        if prompt + output > limit:
            output = min(output, limit - 1)
            prompt = limit - output
            clipped += 1
            t = replace(t, prompt_tokens=prompt, output_tokens=output)
        fitted.append(t)
        longest = max(longest, prompt + output)
    return min(limit, longest + 1), fitted, clipped
