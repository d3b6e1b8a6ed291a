"""Request files with prompt text as workloads (schedkit/sim/text_requests.py): vllm bench's
custom JSONL and ShareGPT JSON, guidellm's JSONL and CSV, counted with a real tokenizer
(tests/sim/data/tiny-tokenizer, trained on schedkit's docs by make_tokenizer.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenizers

from schedkit.errors import SchedkitError
from schedkit.workload import load_workload
from schedkit.workload.formats.prompt_text import DEFAULT_OUTPUT_TOKENS, HASH_BLOCK_TOKENS

TOKENIZER = str(Path(__file__).parent / "data" / "tiny-tokenizer")
SYSTEM = "You are a scheduler. Admission, ordering and eviction decide what users feel. " * 4


def count(text: str) -> int:
    fast = tokenizers.Tokenizer.from_file(f"{TOKENIZER}/tokenizer.json")
    return len(fast.encode(text).ids)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_vllm_custom_jsonl_counts_prompts_with_the_tokenizer(tmp_path: Path) -> None:
    prompts = [SYSTEM + "Which request goes first?", SYSTEM + "Which block goes?", "Hi there"]
    rows = [{"prompt": prompts[0], "output_tokens": 10}, {"prompt": prompts[1], "output_tokens": 7}]
    rows.append({"prompt": prompts[2]})  # no output_tokens: vllm bench's default
    w = load_workload(write_jsonl(tmp_path / "custom.jsonl", rows), tokenizer=TOKENIZER)
    assert [r.prompt_tokens for r in w.requests] == [count(p) for p in prompts]
    assert [r.output_tokens for r in w.requests] == [10, 7, DEFAULT_OUTPUT_TOKENS]
    assert [r.request_id for r in w.requests] == ["custom-000000", "custom-000001", "custom-000002"]
    # the shared system prompt is shared prefix blocks; the rest are each prompt's own
    a, b, c = (r.hash_ids for r in w.requests)
    assert w.hash_block_tokens == HASH_BLOCK_TOKENS
    assert len(a) == count(prompts[0]) // HASH_BLOCK_TOKENS
    shared = count(SYSTEM) // HASH_BLOCK_TOKENS - 1
    assert shared >= 3 and a[:shared] == b[:shared] and a[-1] != b[-1]
    assert c == ()  # shorter than one block
    arrivals = [r.arrival_s for r in w.requests]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals)
    assert "JSONL request file" in w.source and "Poisson arrivals at 1 request/s" in w.source


def test_arrivals_are_poisson_at_one_request_a_second(tmp_path: Path) -> None:
    rows = [{"prompt": f"request {i}", "output_tokens": 4} for i in range(4000)]
    w = load_workload(write_jsonl(tmp_path / "many.jsonl", rows), tokenizer=TOKENIZER)
    gaps = np.diff([r.arrival_s for r in w.requests])
    assert 0.95 < gaps.mean() < 1.05 and 0.9 < gaps.std() / gaps.mean() < 1.1  # exponential
    again = load_workload(write_jsonl(tmp_path / "again.jsonl", rows), tokenizer=TOKENIZER)
    assert [r.arrival_s for r in again.requests] == [r.arrival_s for r in w.requests]


def test_guidellm_csv_with_a_prefix_column_and_token_counts(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["system_prompt", "question", "prompt_tokens_count", "output_tokens_count"])
        out.writerow([SYSTEM, 'A "quoted", comma question?', "", "12"])
        out.writerow(["", "Second one", "", "3"])
    w = load_workload(str(path), tokenizer=TOKENIZER)
    assert [r.prompt_tokens for r in w.requests] == [
        count(SYSTEM + 'A "quoted", comma question?'),
        count("Second one"),
    ]
    assert [r.output_tokens for r in w.requests] == [12, 3]

    # token counts in every row: no tokenizer needed, and no prefix hashes
    counted = tmp_path / "counted.jsonl"
    rows = [{"prompt": "x", "prompt_tokens_count": 900, "output_tokens_count": 40}] * 3
    w = load_workload(write_jsonl(counted, rows))
    assert [(r.prompt_tokens, r.output_tokens, r.hash_ids) for r in w.requests] == [
        (900, 40, ())
    ] * 3
    assert w.hash_block_tokens == 0


def test_sharegpt_takes_the_first_two_turns_within_vllms_limits(tmp_path: Path) -> None:
    def conversation(prompt: str, answer: str, *more: str) -> dict[str, Any]:
        turns = [prompt, answer, *more]
        return {"id": prompt[:8], "conversations": [
            {"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(turns)
        ]}  # fmt: skip

    long_answer = "The policy admits, orders and evicts. " * 40
    data = [
        conversation(SYSTEM + "Which first?", long_answer, "and then?", "more"),
        {"id": "one-turn", "conversations": [{"from": "human", "value": "alone"}]},  # left out
        conversation("Hi", long_answer),  # prompt under 4 tokens: vLLM skips it
        conversation("What does a scheduler decide here?", "Ok"),  # output under 4 tokens
        conversation("Why is the queue long right now?", long_answer),
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    w = load_workload(str(path), tokenizer=TOKENIZER)
    assert [r.prompt_tokens for r in w.requests] == [
        count(SYSTEM + "Which first?"),
        count("Why is the queue long right now?"),
    ]
    assert [r.output_tokens for r in w.requests] == [count(long_answer)] * 2
    assert "2 conversations outside vLLM's length limits skipped" in w.source
    first = load_workload(str(path), tokenizer=TOKENIZER, max_requests=1)
    assert [r.prompt_tokens for r in first.requests] == [count(SYSTEM + "Which first?")]


def test_a_workload_spec_json_is_still_a_spec(tmp_path: Path) -> None:
    spec = {"name": "spec", "duration_s": 5, "seed": 0,
            "tenant": [{"name": "a", "rate": 2.0, "prompt_mean": 100, "output_mean": 10}]}  # fmt: skip
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    w = load_workload(str(path))  # a JSON object: the multi-tenant spec, not ShareGPT
    assert w.requests and "request file" not in w.source
    assert {r.tenant for r in w.requests} == {"a"}


@pytest.mark.parametrize(
    ("rows", "tokenizer", "message"),
    [
        ([{"prompt": "no counts"}], None, r"line 1 has prompt text and no token counts.*--tokenizer"),
        ([{"prompt": "a", "output_tokens": "many"}], TOKENIZER, r"line 1: output_tokens must be a non-negative integer, got 'many'"),
        ([{"prompt": "a"}, {"question": 3}], TOKENIZER, r"line 2: expected prompt text in one of prompt"),
        ([{"prompt": "a"}, {"response": "b"}], TOKENIZER, r"line 2: expected prompt text"),
        ([{"prompt": "a", "output_tokens": -1}], TOKENIZER, r"output_tokens must be a non-negative"),
        ([{"prompt": "a"}], "/no/such/tokenizer-dir", r"cannot load tokenizer '/no/such/tokenizer-dir'"),
    ],
)  # fmt: skip
def test_bad_request_files_name_the_row_and_the_fix(
    tmp_path: Path, rows: list[dict[str, Any]], tokenizer: str | None, message: str
) -> None:
    with pytest.raises(SchedkitError, match=message):
        load_workload(write_jsonl(tmp_path / "bad.jsonl", rows), tokenizer=tokenizer)


def test_sharegpt_needs_the_tokenizer_and_well_formed_turns(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"value": "a b c d e"}, {"value": "f g h"}]}]))
    with pytest.raises(SchedkitError, match=r"conversation 0 has prompt text.*--tokenizer"):
        load_workload(str(path))
    path.write_text(json.dumps([{"conversations": ["just text", "more"]}]))
    with pytest.raises(SchedkitError, match=r"conversation 0: a turn must be an object"):
        load_workload(str(path), tokenizer=TOKENIZER)
    path.write_text("[{]")
    with pytest.raises(SchedkitError, match=r"not valid JSON"):
        load_workload(str(path), tokenizer=TOKENIZER)


def test_bench_replays_a_request_file_at_a_request_rate(tmp_path: Path) -> None:
    """`schedkit bench --workload FILE --tokenizer DIR --request-rate R`, as a user runs it."""
    import os
    import subprocess
    import sys

    rows = [{"prompt": SYSTEM * (1 + i % 3) + f"question {i}", "output_tokens": 20 + i % 7}
            for i in range(120)]  # fmt: skip
    path = write_jsonl(tmp_path / "prompts.jsonl", rows)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit", "bench", "--workload", path, "--tokenizer", TOKENIZER,
         "--request-rate", "8", "--policy", "fcfs", "--policy", "sjf", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["workload"]["rate_rps"] == pytest.approx(8.0)
    assert [a["metrics"]["completed"] for a in results["arms"]] == [120, 120]
    assert all(a["metrics"]["prefix_hit_rate"] > 0 for a in results["arms"])  # shared prompts
