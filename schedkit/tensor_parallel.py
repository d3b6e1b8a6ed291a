"""Which tensor-parallel degrees a model's attention can be split over, and how many
heads a model has (its ``config.json``, in a directory or the Hugging Face cache).

The rule is the engines' own: vLLM (``ModelConfig.verify_with_parallel_config`` and
``QKVParallelLinear``), SGLang (``QKVParallelLinear``) and LMDeploy
(``ModelConfig.get_num_qkv_head_by_tp``) each need the degree to divide the attention
heads, and either to divide the KV heads or to be a multiple of them (each KV head then
replicated on ``tp / kv_heads`` GPUs). The simulator's profiles and ``schedkit serve``'s
pre-launch check (``schedkit.edge.serving.check_tensor_parallel``) both use it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "AttentionHeads",
    "hub_cache_dir",
    "model_config_file",
    "read_attention_heads",
    "tp_degrees",
    "tp_splits",
]


def tp_splits(heads: int, kv_heads: int, tp: int) -> bool:
    """Whether ``tp`` GPUs can split ``heads`` attention heads and ``kv_heads`` KV heads."""
    if tp < 1 or heads % tp:
        return False
    return kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0


def tp_degrees(heads: int, kv_heads: int) -> list[int]:
    """Every degree :func:`tp_splits` accepts, smallest first."""
    return [tp for tp in range(1, heads + 1) if tp_splits(heads, kv_heads, tp)]


@dataclass(frozen=True)
class AttentionHeads:
    """A model's attention heads and KV heads, as read from its ``config.json``."""

    heads: int
    kv_heads: int

    @property
    def degrees(self) -> list[int]:
        return tp_degrees(self.heads, self.kv_heads)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_attention_heads(config_file: Path) -> AttentionHeads | None:
    """The heads in a Hugging Face ``config.json`` (its ``text_config`` for a multimodal
    model), or None when the file cannot be read or names no heads: the engine decides.

    KV heads default to the attention heads. A multi-head latent attention model
    (``kv_lora_rank``, DeepSeek's MLA) caches one latent per token, not per-head K and V, so
    only its attention heads constrain the split.
    """
    try:
        data = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config")
    config = text if isinstance(text, dict) else data
    heads = _count(config.get("num_attention_heads"))
    if heads is None:
        return None
    kv_heads = _count(config.get("num_key_value_heads"))
    if kv_heads is None or config.get("kv_lora_rank") is not None:
        kv_heads = heads
    return AttentionHeads(heads, kv_heads)


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where ``huggingface_hub`` keeps downloaded models: ``HF_HUB_CACHE`` (or the older
    ``HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    hub = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(hub or os.path.join(home, "hub")).expanduser()


_REVISION = re.compile(r"[\w.-]+")


def model_config_file(
    model: str,
    *,
    download_dir: str | None = None,
    revision: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """The ``config.json`` of ``model``: a local directory, or a Hugging Face hub id whose
    files are already in the hub cache (``download_dir`` first, where the engine was told
    to download to). None when it is not on this machine; reads no network."""
    try:
        local = Path(model).expanduser()
        if (local / "config.json").is_file():
            return local / "config.json"
        if local.exists() or model.count("/") > 1 or model.startswith((".", "/", "~")):
            return None  # a directory without a config.json, or not a hub id
        caches = [Path(download_dir).expanduser()] if download_dir else []
        caches.append(hub_cache_dir(os.environ if environ is None else environ))
        repo = "models--" + model.replace("/", "--")
        for cache in caches:
            ref = cache / repo / "refs" / (revision or "main")
            # A branch or tag names its commit in refs/; a commit hash is its own name.
            commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
            if commit and _REVISION.fullmatch(commit) and commit not in (".", ".."):
                snapshot = cache / repo / "snapshots" / commit / "config.json"
                if snapshot.is_file():
                    return snapshot
    except (OSError, UnicodeDecodeError, ValueError):  # e.g. a name too long for a path
        return None
    return None
