"""Shared fixtures for the SGLang adapter's tests, and the environment SGLang needs here.

Every SGLang process these tests start (in-process or spawned) runs on CPU with the
CUDA-only imports stubbed (``schedkit_sglang.cpu``) and never reaches the Hugging Face hub:
set at import, before any test imports SGLang, and inherited by child processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schedkit_sglang import cpu

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(cpu.SITE_DIR) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(cpu.SITE_DIR), *_paths])
cpu.install()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama (2 layers, hidden 64, vocab 2048) with no tokenizer:
    start SGLang on it with ``--skip-tokenizer-init`` and send ``input_ids``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=2048,
        max_position_embeddings=2048,
    )
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path
