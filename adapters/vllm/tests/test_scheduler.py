"""Construction, configuration and the no-config path against the real vLLM scheduler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Run, VllmScheduler, free_blocks, make_request, run_until_idle, step
from schedkit.errors import PolicyConfigError, UnknownPolicyError

from schedkit_vllm import AsyncScheduler, Scheduler


def _stream() -> list[Any]:
    """Mixed lengths, priorities and a shared prefix; enough to preempt in 40 blocks."""
    shared = list(range(100, 148))
    requests = []
    for i in range(12):
        prompt: int | list[int] = shared + [500 + i] * 10 if i % 3 == 0 else 20 + 17 * i
        requests.append(make_request(f"r{i}", prompt, max_tokens=40 + 5 * i, priority=i % 2))
    return requests


def _replay(scheduler: Any) -> Any:
    initial = free_blocks(scheduler)
    for request in _stream():
        scheduler.add_request(request)
    run = run_until_idle(scheduler)
    assert free_blocks(scheduler) == initial
    return run


@pytest.mark.parametrize("schedkit", [None, {"policy": ["fcfs"]}])
def test_no_policy_schedules_exactly_like_stock_vllm(make_scheduler: Any, schedkit: Any) -> None:
    stock = _replay(make_scheduler(cls=VllmScheduler, num_blocks=40))
    ours = make_scheduler(schedkit, num_blocks=40)
    run = _replay(ours)
    assert any(stock.preempted), "the stream should exercise preemption"
    assert run.steps == stock.steps
    assert run.preempted == stock.preempted
    assert run.finished == stock.finished
    if schedkit is None:
        assert ours.schedkit is None


def test_async_scheduler_variant_builds(make_scheduler: Any) -> None:
    scheduler = make_scheduler({"policy": "priority"}, cls=AsyncScheduler)
    assert isinstance(scheduler, AsyncScheduler)
    assert scheduler.schedkit is not None
    assert scheduler.schedkit.facade.label == "priority"


def test_unknown_policy_fails_construction_listing_installed(make_scheduler: Any) -> None:
    with pytest.raises(UnknownPolicyError) as info:
        make_scheduler({"policy": ["no-such-policy"]})
    message = str(info.value)
    assert "no-such-policy" in message
    assert "fcfs" in message and "priority" in message


def test_bad_options_fail_construction(make_scheduler: Any) -> None:
    with pytest.raises(PolicyConfigError, match="fcfs"):
        make_scheduler({"policy": ["fcfs"], "options": {"fcfs": {"nope": 1}}})
    with pytest.raises(PolicyConfigError, match="not selected"):
        make_scheduler({"policy": ["fcfs"], "options": {"priority": {}}})


def test_victim_policy_runs_in_vllm_priority_mode_too(make_scheduler: Any) -> None:
    # The adapter steers vLLM's own preemption branch, so --scheduling-policy priority
    # (vLLM's priority waiting heap) works with a victim policy: the policy's victim is
    # preempted, and vLLM's policy is restored after every step.
    from vllm.v1.core.sched.request_queue import SchedulingPolicy

    scheduler = make_scheduler({"policy": ["priority"]}, policy="priority", num_blocks=17)
    for i, prio in enumerate([0, 5, 0, 0]):
        scheduler.add_request(
            make_request(f"r{i}", 64, max_tokens=40, priority=prio, arrival_time=1000.0 + i)
        )
    run = run_until_idle(scheduler)
    assert next(p for p in run.preempted if p) == ["r1"]
    assert scheduler.policy == SchedulingPolicy.PRIORITY
    assert len(run.finished) == 4


def test_config_file_from_environment(
    make_scheduler: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "schedkit.toml"
    path.write_text('policy = ["priority"]\n')
    monkeypatch.setenv("SCHEDKIT_CONFIG", str(path))
    scheduler = make_scheduler()
    assert scheduler.schedkit is not None and scheduler.schedkit.facade.label == "priority"
    # additional_config wins over the environment.
    scheduler = make_scheduler({"policy": ["fcfs"]})
    assert scheduler.schedkit.facade.label == "fcfs"


def test_missing_config_file_is_an_error(
    make_scheduler: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDKIT_CONFIG", str(tmp_path / "absent.json"))
    with pytest.raises(PolicyConfigError, match="SCHEDKIT_CONFIG"):
        make_scheduler()


def test_scheduler_cls_resolves_by_qualified_name(make_scheduler: Any) -> None:
    scheduler = make_scheduler({"policy": ["fcfs"]})
    config = scheduler.vllm_config.scheduler_config
    config.scheduler_cls = "schedkit_vllm.Scheduler"
    assert config.get_scheduler_cls() is Scheduler
    json.dumps(scheduler.vllm_config.additional_config)  # must stay JSON for vLLM's hash


def test_a_scheduler_built_without_init_is_stock_vllm(make_scheduler: Any) -> None:
    """vLLM's own tests build schedulers with ``object.__new__`` and set only the
    attributes they need: such a scheduler has no policies and schedules as vLLM's."""
    stock = _replay(make_scheduler(cls=VllmScheduler, num_blocks=40))
    ours = object.__new__(Scheduler)
    ours.__dict__.update(make_scheduler(cls=VllmScheduler, num_blocks=40).__dict__)
    assert ours.schedkit is None
    run = _replay(ours)
    assert (run.steps, run.preempted, run.finished) == (
        stock.steps,
        stock.preempted,
        stock.finished,
    )


def test_victims_follow_a_replaced_kv_cache_manager(make_scheduler: Any) -> None:
    """vLLM's tests swap ``kv_cache_manager`` after construction: the policy still picks
    the victim when the new manager runs out of blocks."""
    scheduler = make_scheduler({"policy": ["priority"]}, num_blocks=200)
    scheduler.kv_cache_manager = make_scheduler(cls=VllmScheduler, num_blocks=17).kv_cache_manager
    run = Run()
    # r1 (priority 5) is admitted before r2 and r3, so vLLM's fcfs victim is r3
    for i, prio in enumerate([0, 5, 0, 0]):
        scheduler.add_request(
            make_request(f"r{i}", 64, max_tokens=40, priority=prio, arrival_time=1000.0 + i)
        )
        if i == 1:
            step(scheduler, run)
    run = run_until_idle(scheduler, run)
    assert next(p for p in run.preempted if p) == ["r1"]
    assert len(run.finished) == 4
