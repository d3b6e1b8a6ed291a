"""The real SGLang engine (CPU, tiny random model) runs schedkit policies: order,
admission, retraction victims, evictions, budgets; without a config it is stock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_util import engine, finish_order, generate_each, prompt, read_lines

GREEDY = {"max_new_tokens": 4, "ignore_eos": True}


def test_without_a_config_sglang_schedules_first_come_first_served(model_dir: Path) -> None:
    prompts = [prompt(i, 60 - 8 * i) for i in range(6)]
    with engine(model_dir, max_running_requests=1) as llm:
        outputs = llm.generate(input_ids=prompts, sampling_params=GREEDY)
    assert finish_order(outputs) == [0, 1, 2, 3, 4, 5]


def test_an_ordering_policy_replaces_sglangs_order(model_dir: Path) -> None:
    prompts = [prompt(i, 60 - 8 * i) for i in range(6)]
    with engine(model_dir, "shortest-prompt", max_running_requests=1) as llm:
        outputs = llm.generate(input_ids=prompts, sampling_params=GREEDY)
    assert finish_order(outputs) == [5, 4, 3, 2, 1, 0]
    assert all(o["meta_info"]["completion_tokens"] == 4 for o in outputs)


def test_priority_orders_lower_values_first_above_128_waiting_with_lpm(model_dir: Path) -> None:
    # SGLang's lpm silently falls back to FCFS above 128 waiting requests, and its own
    # priority order (without --schedule-low-priority-values-first) is higher first.
    # A long first request holds the only running slot while the others queue up.
    n = 150
    priorities = [(i * 37) % n for i in range(n)]
    requests = [
        {"input_ids": prompt(n, 12), "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    ] + [
        {"input_ids": prompt(i, 12), "sampling_params": {"max_new_tokens": 1}, "priority": p}
        for i, p in enumerate(priorities)
    ]
    with engine(model_dir, "priority", max_running_requests=1, schedule_policy="lpm") as llm:
        outputs = generate_each(llm, requests, head_start=0.5)
    order = finish_order(outputs)
    assert order[0] == 0
    served = [requests[i]["priority"] for i in order[1:]]
    assert served == sorted(served)


def test_rejected_requests_end_with_the_reason_and_the_rest_complete(model_dir: Path) -> None:
    requests = [
        {"input_ids": prompt(i, 20 if i % 2 else 40), "sampling_params": GREEDY} for i in range(6)
    ]
    with engine(model_dir, "test-reject-long", {"test-reject-long": {"max_prompt": 32}}) as llm:
        outputs = generate_each(llm, requests)
        streamed = list(llm.generate(input_ids=prompt(9, 40), sampling_params=GREEDY, stream=True))
    for i, out in enumerate(outputs):
        if i % 2:
            assert out["meta_info"]["finish_reason"]["type"] == "length"
            assert out["meta_info"]["completion_tokens"] == 4
        else:  # SGLang answers as to a full queue: HTTP 503 with the reason
            assert getattr(out, "status_code", None) == 503
            assert out.detail == "rejected: prompt of 40 tokens > 32"
    finish = streamed[-1]["meta_info"]["finish_reason"]
    assert finish["type"] == "abort"
    assert finish["message"] == "rejected: prompt of 40 tokens > 32"


def _retractions(model_dir: Path, policy: str | None) -> list[int]:
    # SGLang's test switch retracts one decoding request every 3rd step; its default
    # victim is the one with the fewest output tokens, then the longest prompt.
    lengths = [40, 36, 32, 12]
    params = [
        {"max_new_tokens": 24, "ignore_eos": True, "custom_params": {"tenant": tenant}}
        for tenant in ("a", "b", "c", "victim")
    ]
    retract = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "3"}
    with engine(model_dir, policy, extra_env=retract) as llm:
        outputs = llm.generate(
            input_ids=[prompt(i, n) for i, n in enumerate(lengths)], sampling_params=params
        )
    assert all(o["meta_info"]["completion_tokens"] == 24 for o in outputs)
    return [int(o["meta_info"]["num_retractions"]) for o in outputs]


def test_a_victim_policy_chooses_whom_sglang_retracts(model_dir: Path) -> None:
    stock = _retractions(model_dir, None)
    assert stock[3] == 0 and sum(stock) > 0  # SGLang retracts the long prompts
    chosen = _retractions(model_dir, "test-marked-victims")
    assert chosen[3] > 0 and chosen[:3] == [0, 0, 0]


def _cached_on_return(model_dir: Path, policy: str | None) -> int:
    """Prompts A, B, then C need eviction (the pool holds two); then A again: how many
    of A's tokens are still cached."""
    a, b, c = (prompt(i, 300) for i in range(3))
    params = {"max_new_tokens": 2, "ignore_eos": True}
    with engine(model_dir, policy, max_total_tokens=900, radix_cache_backend="schedkit") as llm:
        for ids in (a, b, c):
            llm.generate(input_ids=ids, sampling_params=params)
        again = llm.generate(input_ids=a, sampling_params=params)
    return int(again["meta_info"]["cached_tokens"])


def test_an_eviction_policy_chooses_which_prefix_sglang_evicts(model_dir: Path) -> None:
    assert _cached_on_return(model_dir, "fcfs") == 0  # LRU evicted A
    assert _cached_on_return(model_dir, "test-evict-recent") >= 256  # B went instead


def _max_running(model_dir: Path, tmp_path: Path, policy: str) -> int:
    log = tmp_path / f"{policy}.jsonl"
    options = {"test-step-log": {"path": str(log)}}
    with engine(model_dir, f"{policy}+test-step-log", options) as llm:
        outputs = llm.generate(
            input_ids=[prompt(i, 16) for i in range(4)],
            sampling_params={"max_new_tokens": 8, "ignore_eos": True},
        )
    assert all(o["meta_info"]["completion_tokens"] == 8 for o in outputs)
    return max(line["running"] for line in read_lines(log))


def test_a_batch_budget_limits_how_many_requests_run(model_dir: Path, tmp_path: Path) -> None:
    assert _max_running(model_dir, tmp_path, "fcfs") == 4
    assert _max_running(model_dir, tmp_path, "test-one-at-a-time") == 1


def _preempted_by_priority(model_dir: Path, policy: str | None) -> dict[str, int]:
    """Two priority-20 requests fill the batch; a priority-0 one arrives and SGLang's
    priority preemption makes room. Returns num_retractions by tenant.

    Each long request is streamed and the next one sent once it produced its first token
    (it is running), so the urgent one finds both running however fast they decode."""
    long = {"max_new_tokens": 300, "ignore_eos": True}

    async def run(llm: Any) -> list[Any]:
        streams = []
        for i, tenant in enumerate(("victim", "a")):
            params = {**long, "custom_params": {"tenant": tenant}}
            stream = await llm.async_generate(
                input_ids=prompt(i, 16), sampling_params=params, priority=20, stream=True
            )
            streams.append((stream, await stream.__anext__()))
        urgent = {"max_new_tokens": 2, "custom_params": {"tenant": "urgent"}}
        done = await llm.async_generate(input_ids=prompt(2, 16), sampling_params=urgent, priority=0)
        outputs = []
        for stream, last in streams:
            async for out in stream:
                last = out
            outputs.append(last)
        return [*outputs, done]

    with engine(
        model_dir,
        policy,
        max_running_requests=2,
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=True,
    ) as llm:
        outputs = llm.loop.run_until_complete(run(llm))
    tenants = ("victim", "a", "urgent")
    return {
        t: int(o["meta_info"]["num_retractions"]) for t, o in zip(tenants, outputs, strict=True)
    }


def test_a_victim_policy_chooses_whom_priority_preemption_takes(model_dir: Path) -> None:
    # SGLang preempts the newest of the equally low requests: "a".
    assert _preempted_by_priority(model_dir, None) == {"victim": 0, "a": 1, "urgent": 0}
    assert _preempted_by_priority(model_dir, "test-marked-victims") == {
        "victim": 1,
        "a": 0,
        "urgent": 0,
    }


def test_request_views_name_the_cached_prefix_nodes_they_reuse(
    model_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "steps.jsonl"
    a, b = prompt(0, 300), prompt(1, 300)
    params = {"max_new_tokens": 2, "ignore_eos": True}
    options = {"test-step-log": {"path": str(log)}}
    with engine(model_dir, "test-step-log", options, radix_cache_backend="schedkit") as llm:
        first = llm.generate(input_ids=a, sampling_params=params)
        again = llm.generate(input_ids=a + prompt(2, 20), sampling_params=params)
        other = llm.generate(input_ids=b, sampling_params=params)
    seen: dict[str, list[int]] = {}
    for line in read_lines(log):  # reported after each step, so after its own insert
        for rid, hashes in line["block_hashes"].items():
            seen.setdefault(rid, hashes)
    head = seen[first["meta_info"]["id"]]
    assert len(head) == 1  # A's prompt, one radix node
    assert seen[again["meta_info"]["id"]][0] == head[0]  # reuses it, then its own suffix
    assert head[0] not in seen[other["meta_info"]["id"]]  # shares nothing
    assert again["meta_info"]["cached_tokens"] >= 256
