"""Shared fixtures for the SGLang adapter's tests, and the environment SGLang needs here.

Every SGLang process these tests start (in-process or spawned) runs on CPU with the
CUDA-only imports stubbed (``schedkit_sglang.cpu``) and never reaches the Hugging Face hub:
set at import, before any test imports SGLang, and inherited by child processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from engine_util import tiny_model

from schedkit_sglang import cpu

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
os.environ["PYTHONPATH"] = cpu.pythonpath(os.environ.get("PYTHONPATH", ""))
cpu.install()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama with no tokenizer (``engine_util.tiny_model``)."""
    return tiny_model(tmp_path_factory.mktemp("tiny-llama"))
