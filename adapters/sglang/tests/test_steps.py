"""Step reports describe the batch they report, in SGLang's normal loop and in its overlap
loop (``event_loop_overlap``, the GPU default: it launches batch N+1 before it processes
batch N's results). The overlap loop runs on CPU too (``disable_overlap_schedule=False``),
so both run here on the real engine."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from engine_util import engine, prompt, read_lines


def _run(model_dir: Path, log: Path, overlap: bool) -> tuple[list[dict[str, Any]], int]:
    """Eight requests (two shared 40-token prefixes, so some prompt tokens are cached)
    through 32-token prefill chunks, with SGLang retracting a decoding request every 7th
    batch. Returns the outputs and SGLang's count of batches run."""
    n = 8
    prompts = [prompt(i % 2, 40) + prompt(i, 8 + 4 * (i % 3)) for i in range(n)]
    params = [{"max_new_tokens": 6 + 2 * (i % 4), "ignore_eos": True} for i in range(n)]
    retract = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "7"}
    with engine(
        model_dir,
        "test-step-log",
        {"test-step-log": {"path": str(log)}},
        extra_env=retract,
        disable_overlap_schedule=not overlap,
        chunked_prefill_size=32,
        max_running_requests=4,
    ) as llm:
        assert llm.get_server_info()["disable_overlap_schedule"] is not overlap
        outputs = llm.generate(input_ids=prompts, sampling_params=params)
        [state] = llm.get_server_info()["internal_states"]
    for out, param in zip(outputs, params, strict=True):
        assert out["meta_info"]["completion_tokens"] == param["max_new_tokens"]
    return outputs, int(state["schedkit"]["steps"])


@pytest.mark.parametrize("overlap", [False, True], ids=["normal-loop", "overlap-loop"])
def test_each_batch_is_reported_once_with_its_requests_tokens_and_index(
    model_dir: Path, tmp_path: Path, overlap: bool
) -> None:
    log = tmp_path / "steps.jsonl"
    outputs, batches = _run(model_dir, log, overlap)
    steps = read_lines(log)
    # Every batch SGLang ran (its forward_ct) reported once, in order, as its own index.
    assert [line["step"] for line in steps] == list(range(1, batches + 1))
    tokens: Counter[str] = Counter()
    preempted: Counter[str] = Counter()
    for line in steps:
        scheduled = [rid for rid, _ in line["tokens"]]
        assert sum(n for _, n in line["tokens"]) == line["prefill"] + line["decode"]
        assert line["duration_s"] > 0
        # Retracted while this batch was formed, so not in it.
        assert not set(line["preempted"]) & set(scheduled), line
        tokens.update({rid: n for rid, n in line["tokens"]})
        preempted.update(line["preempted"])
    # engine.num_running when a step is reported counts the requests still running
    # after it: SGLang drops finished requests, and merges a prefill batch into the
    # running one, only when it forms the next batch; the view corrects for both
    for line, nxt in itertools.pairwise(steps):
        carried = {rid for rid, _ in line["tokens"]} & {rid for rid, _ in nxt["tokens"]}
        assert line["running"] >= len(carried), (line["step"], line["running"], carried)
    assert steps[-1]["running"] == 0, steps[-1]
    retracted = 0
    for out in outputs:
        meta = out["meta_info"]
        rid = meta["id"]
        assert preempted[rid] == meta["num_retractions"]
        retracted += meta["num_retractions"]
        # The prompt's uncached tokens, then one per output token but the last (which
        # is sampled, never fed back); a retracted request recomputes what it had.
        computed = meta["prompt_tokens"] - meta["cached_tokens"] + meta["completion_tokens"] - 1
        if meta["num_retractions"] == 0:
            assert tokens[rid] == computed, (rid, meta)
        else:
            assert tokens[rid] > computed, (rid, meta)
    assert retracted > 0 and any(o["meta_info"]["cached_tokens"] for o in outputs)
