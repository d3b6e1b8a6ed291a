"""What the twin and the real-engine bench share: trace requests as vLLM inputs.

The engine-agnostic part (prompt token ids with shared prefixes kept, records filled as
the simulator fills them, tenant and SLO metadata) lives in ``schedkit.bench.replay`` and
is re-exported here; the metadata goes in vLLM's ``SamplingParams.extra_args``. What is
vLLM's own: a stub model directory for the model-less twin.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from schedkit.bench.replay import (
    in_vocab,
    new_record,
    output_token_id,
    prompt_token_ids,
    shared_prefix_tokens,
)
from schedkit.bench.replay import request_metadata as extra_args

__all__ = [
    "extra_args",
    "in_vocab",
    "new_record",
    "output_token_id",
    "prompt_token_ids",
    "shared_prefix_tokens",
    "stub_model_dir",
]

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
