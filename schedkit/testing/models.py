"""Tiny random-weight Llama models for the real-engine tests and benchmarks (issue #36).

One builder instead of a copy per adapter and script. transformers (and tokenizers, for a
tokenizer) is imported only when a model is built, so importing this module loads nothing
heavy; the engines' environments have both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["TINY_LLAMA", "VLLM_CPU", "WORD_CHAT_TEMPLATE", "tiny_llama"]

TINY_LLAMA: Final[Mapping[str, Any]] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 2048,
    "max_position_embeddings": 2048,
}
"""The config's sizes: 2 layers, hidden 64 (head_dim 16), 4 attention and 4 key-value
heads, a 2,048-token vocabulary and 2,048 positions."""

VLLM_CPU: Final[Mapping[str, Any]] = {
    "hidden_size": 256,  # head_dim 64: vLLM's CPU attention kernels have no head_dim 16
    "intermediate_size": 512,
    "vocab_size": 512,
    "max_position_embeddings": 512,
}
"""The overrides for vLLM's CPU engine: ``tiny_llama(path, **VLLM_CPU)``."""

WORD_CHAT_TEMPLATE: Final = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
"""A chat template that joins the messages' contents: with the word tokenizer, a chat
prompt of k words is k tokens."""


def tiny_llama(
    path: Path,
    *,
    weights: bool = True,
    word_tokenizer: bool = False,
    chat_template: bool = False,
    **overrides: Any,
) -> Path:
    """Write a tiny Llama into ``path`` (created if missing) and return ``path``.

    It writes ``config.json``: the ``LlamaConfig`` of ``TINY_LLAMA`` with ``overrides``
    (any ``LlamaConfig`` argument, e.g. ``**VLLM_CPU``). With ``weights`` (the default),
    the model is saved by ``LlamaForCausalLM.save_pretrained``: that ``config.json``
    (naming the architecture and dtype float32), ``generation_config.json`` and random
    float32 weights in ``model.safetensors``; without, ``LlamaConfig.save_pretrained``
    writes the config alone, for code that reads only the config. With ``word_tokenizer``,
    a fast tokenizer of one word per token (``t0`` .. ``t<vocab_size - 1>``, unknown
    ``t0``, end of sequence ``t2``: ``tokenizer.json``, ``tokenizer_config.json``) for
    engines that detokenize; ``chat_template`` adds ``WORD_CHAT_TEMPLATE`` to it
    (``chat_template.jinja``). Without a tokenizer, start the engine with its tokenizer
    skipped and send token ids.
    """
    if chat_template and not word_tokenizer:
        raise ValueError(
            "chat_template=True needs word_tokenizer=True: the template is that tokenizer's"
        )
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_LLAMA, **overrides})
    if weights:
        LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    else:
        config.save_pretrained(path)
    if word_tokenizer:
        _save_word_tokenizer(path, config.vocab_size, chat_template)
    return path


def _save_word_tokenizer(path: Path, vocab_size: int, chat_template: bool) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    words.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", eos_token="t2")
    if chat_template:
        tokenizer.chat_template = WORD_CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
