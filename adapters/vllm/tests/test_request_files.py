"""vllm bench's request files read by schedkit give the requests vLLM's own dataset
classes sample from them: the same prompts in the same order, the same prompt and output
token counts (``vllm bench serve --disable-shuffle --skip-chat-template``), counted with a
real tokenizer through transformers as vLLM counts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schedkit.workload import load_workload
from transformers import AutoTokenizer
from vllm.benchmarks.datasets import CustomDataset, ShareGPTDataset

TOKENIZER = str(Path(__file__).parents[3] / "tests" / "sim" / "data" / "tiny-tokenizer")
TEXT = "Admission, ordering, preemption and eviction decide what the users of a service feel. "


def sharegpt(n: int) -> list[dict[str, Any]]:
    conversations = []
    for i in range(n):
        prompt = TEXT * (i % 40) + f"Question {i}: which request should go first?"
        answer = "It depends on the policy. " * (i % 120)  # some over 2,048 in all
        turns = [prompt, answer] if i % 9 else [prompt]  # one-turn entries: left out
        conversations.append({"id": str(i), "conversations": [
            {"from": "human" if k % 2 == 0 else "gpt", "value": t} for k, t in enumerate(turns)
        ]})  # fmt: skip
    return conversations


def test_sharegpt_as_vllm_samples_it(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(sharegpt(300)))
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    samples = ShareGPTDataset(dataset_path=str(path), disable_shuffle=True).sample(
        tokenizer=tokenizer, num_requests=120, no_oversample=True
    )
    ours = load_workload(str(path), tokenizer=TOKENIZER, max_requests=120)
    assert len(samples) == len(ours.requests) == 120
    assert [(s.prompt_len, s.expected_output_len) for s in samples] == [
        (r.prompt_tokens, r.output_tokens) for r in ours.requests
    ]


def test_custom_jsonl_as_vllm_samples_it(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    rows = [
        {"prompt": TEXT * (i % 5) + f"Prompt {i}", "output_tokens": 1 + i * 3} for i in range(80)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    samples = CustomDataset(dataset_path=str(path), disable_shuffle=True).sample(
        tokenizer=tokenizer, num_requests=80, output_len=-1, skip_chat_template=True,
        no_oversample=True,
    )  # fmt: skip
    ours = load_workload(str(path), tokenizer=TOKENIZER)
    assert [(s.prompt_len, s.expected_output_len) for s in samples] == [
        (r.prompt_tokens, r.output_tokens) for r in ours.requests
    ]
