"""Rebuild tiny-tokenizer/: a byte-level BPE tokenizer (512 tokens) trained on schedkit's
own documentation, so tests count prompt tokens with a real tokenizer and no download.

    python tests/sim/data/make_tokenizer.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "tiny-tokenizer"


def main() -> None:
    texts = [p.read_text() for p in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    OUT.mkdir(exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>"}
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
