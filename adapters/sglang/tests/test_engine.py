"""The real SGLang engine (CPU, tiny random model) runs schedkit policies: order,
admission, retraction victims, evictions, budgets; without a config it is stock."""

from __future__ import annotations

from pathlib import Path

from engine_util import engine, finish_order, generate_each, prompt

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
