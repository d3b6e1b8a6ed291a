"""A KV connector (``--kv-transfer-config``) leaves the policy in charge (issue #39 item 2).

vLLM skips preemption only while its connector has pending block frees
(``connector.has_pending_block_frees()``); otherwise a connector changes nothing about
who is preempted, so neither may the adapter. These tests configure vLLM's own
``ExampleConnector`` (the disk-backed one; model-less, nothing is ever stored, so it
reports no external hits) and drive the sync scheduler as ``EngineCore.step`` does and
the async one as ``EngineCore.step_with_batch_queue`` does (a batch queue of 2).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import BLOCK_SIZE, Run, make_request
from schedkit import Policy, PolicyOptions, RequestView, hookimpl
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

from schedkit_vllm import AsyncScheduler, Scheduler
from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output

# name -> (schedkit class, stock vLLM class, batch queue depth)
DRIVERS = {
    "sync": (Scheduler, VllmScheduler, 1),
    "async": (AsyncScheduler, VllmAsyncScheduler, 2),
}


def build(
    cls: type,
    model_dir: Path,
    storage: Path | None,
    schedkit: dict[str, Any] | None = None,
    *,
    policy: str = "fcfs",
    num_blocks: int = 19,
) -> Any:
    """A model-less ``cls`` over ``num_blocks`` blocks (18 usable), with vLLM's
    ``ExampleConnector`` storing under ``storage`` (``None``: no connector), under
    vLLM's ``--scheduling-policy`` ``policy``."""
    kv_transfer = None
    if storage is not None:
        kv_transfer = {
            "kv_connector": "ExampleConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": str(storage)},
        }
    scheduler = build_scheduler(
        num_blocks=num_blocks,
        block_size=BLOCK_SIZE,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        policy=policy,
        schedkit=schedkit,
        cls=cls,
        model_dir=model_dir,
        kv_transfer=kv_transfer,
    )
    assert (scheduler.connector is None) is (storage is None)
    return scheduler


# Four 64-token prompts that fill the 18 usable blocks, so decoding runs out of blocks:
# by the schedule() call before which they arrive, (request id, priority). r1 (priority
# 5) is admitted before r2 and r3, so whatever the order hook does, vLLM's running order
# is r0..r3: vLLM's FCFS victim is r3, the priority policy's r1.
ARRIVALS = {0: [("r0", 0), ("r1", 5)], 1: [("r2", 0), ("r3", 0)]}


def drive(scheduler: Any, batch_queue: int, max_steps: int = 2000) -> Run:
    """``ARRIVALS`` stepped until every request ended, with up to ``batch_queue``
    scheduled steps waiting for their update (``EngineCore``'s batch queue)."""
    run = Run()
    queue: deque[tuple[Any, Any]] = deque()
    arrivals = dict(ARRIVALS)
    for _ in range(max_steps):
        for request_id, priority in arrivals.pop(len(run.steps), ()):
            arrival = 1000.0 + int(request_id[1:])
            scheduler.add_request(
                make_request(request_id, 64, max_tokens=40, priority=priority, arrival_time=arrival)
            )
        if not scheduler.has_requests() and not queue:
            return run
        if len(queue) < batch_queue and scheduler.has_requests():
            output = scheduler.schedule()
            ids = list(output.num_scheduled_tokens)
            requests = scheduler.requests
            sampled = [[] if requests[rid].is_prefill_chunk else [7] for rid in ids]
            queue.appendleft((output, model_runner_output(ids, sampled)))
            run.steps.append(dict(output.num_scheduled_tokens))
            run.preempted.append(sorted(output.preempted_req_ids))
            if len(queue) < batch_queue:
                continue  # fill the batch queue before waiting on a result
        for bundle in scheduler.update_from_output(*queue.pop()).values():
            for out in bundle.outputs:
                if out.finish_reason is not None:
                    run.finished[out.request_id] = (out.finish_reason, out.stop_reason)
    raise AssertionError(f"scheduler still busy after {max_steps} steps")


def first_victims(run: Run) -> list[str]:
    return next(p for p in run.preempted if p)


class PendingFrees:
    """``has_pending_block_frees()`` of a connector whose transfers hold blocks that
    will be freed: True in ``scheduler``'s schedule() calls numbered ``pending`` (from
    1), then False (the frees landed). Records the calls in which it was asked."""

    def __init__(self, scheduler: Any, pending: range) -> None:
        self.schedules = 0
        self.pending = pending
        self.asked_in: set[int] = set()
        schedule = scheduler.schedule

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.schedules += 1
            return schedule(*args, **kwargs)

        scheduler.schedule = counted
        scheduler.connector.has_pending_block_frees = self

    def __call__(self) -> bool:
        self.asked_in.add(self.schedules)
        return self.schedules in self.pending


class RecordedVictims(Policy):
    """The default victims (``None``); records the schedule() call (``clock``'s count)
    in which it was asked."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.clock: PendingFrees | None = None
        self.asked_in: list[int] = []

    @hookimpl
    def select_victims(self, running: Sequence[RequestView], needing: RequestView) -> None:
        assert self.clock is not None
        self.asked_in.append(self.clock.schedules)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_policy_victim_is_preempted_with_a_connector(
    driver: str, model_dir: Path, tmp_path: Path
) -> None:
    ours, stock, batch_queue = DRIVERS[driver]
    # With the connector, vLLM's --scheduling-policy fcfs preempts the last running
    # request (r3) and its priority mode the worst priority (r1). schedkit's priority
    # policy on the fcfs engine must do what vLLM's priority mode does, step by step.
    fcfs = drive(build(stock, model_dir, tmp_path / "fcfs"), batch_queue)
    assert first_victims(fcfs) == ["r3"]
    priority_mode = build(stock, model_dir, tmp_path / "priority-mode", policy="priority")
    vllm_priority = drive(priority_mode, batch_queue)
    assert first_victims(vllm_priority) == ["r1"]
    scheduler = build(ours, model_dir, tmp_path / "ours", {"policy": ["priority"]})
    run = drive(scheduler, batch_queue)
    assert run == vllm_priority  # every batch, victim and outcome
    assert len(run.finished) == 4
    # Every victim was the policy's (vLLM may decline one whose blocks a step in flight
    # still uses, and wait: the policy's choice is then placed again later).
    preemptions = sum(len(p) for p in run.preempted)
    assert scheduler.schedkit.num_victims_placed >= preemptions


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_pending_block_frees_defer_preemption_as_in_vllm(
    driver: str, model_dir: Path, tmp_path: Path, register_policy: Any
) -> None:
    ours, stock, batch_queue = DRIVERS[driver]
    register_policy("recorded-victims", RecordedVictims)
    runs = {}
    for name, cls, schedkit in (
        ("stock", stock, None),
        ("recorded", ours, {"policy": ["recorded-victims"]}),
        ("priority", ours, {"policy": ["priority"]}),
    ):
        scheduler = build(cls, model_dir, tmp_path / name, schedkit)
        pending = PendingFrees(scheduler, range(3, 6))
        if name == "recorded":
            scheduler.schedkit.facade.policies[0][1].clock = pending
        runs[name] = (drive(scheduler, batch_queue), scheduler, pending)
    stock_run, _, stock_pending = runs["stock"]
    # Without pending frees vLLM preempts in step 2 (the third schedule() call). With
    # frees pending in calls 3-5 it preempted nobody there, and r3 once they landed.
    assert {3, 4, 5} <= stock_pending.asked_in
    assert stock_run.preempted[:5] == [[]] * 5
    assert stock_run.preempted[5] == ["r3"]
    # The adapter deferred the same way: with default victims its run is vLLM's own,
    # and the policy was asked only once vLLM would preempt, never while frees were
    # pending.
    recorded_run, recorded, _ = runs["recorded"]
    assert recorded_run == stock_run
    asked_in = recorded.schedkit.facade.policies[0][1].asked_in
    assert len(asked_in) >= sum(1 for p in stock_run.preempted if p)
    assert min(asked_in) == 6
    # Once the frees landed, the policy's victim went, not vLLM's.
    priority_run, priority, _ = runs["priority"]
    assert priority_run.preempted[:5] == [[]] * 5
    assert first_victims(priority_run) == ["r1"]
    assert priority.schedkit.num_victims_placed >= 1
    for run, _, _ in runs.values():
        assert len(run.finished) == 4
