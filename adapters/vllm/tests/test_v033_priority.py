"""schedkit's ``priority`` policy against vLLM's ``--scheduling-policy priority``, per release.

vLLM 0.33 changed priority mode: a running request that preempts itself (it is the
lowest-priority one and cannot get a block) no longer ends the running loop, so the
requests behind it still get tokens in that step. The adapter takes a policy's victim that
is the needing request itself through vLLM's FCFS branch, which still stops there, as the
simulator does. schedkit's ``priority`` therefore matches vLLM's priority mode step for
step on 0.32, and on 0.33 lets the requests behind a self-preempting one wait one step.
This pins both, so that a change on either side shows.
"""

from __future__ import annotations

from typing import Any

import vllm
from conftest import Run, VllmScheduler, make_request, step

from schedkit_vllm.compat import parse_version


def _self_preemption(scheduler: Any) -> Run:
    """r0 (lowest priority) runs first, r1/r2 join; 9 usable blocks run out while r0
    decodes, and vLLM's priority mode picks r0 itself as the victim."""
    run = Run()
    scheduler.add_request(make_request("r0", 48, max_tokens=40, priority=5, arrival_time=1000.0))
    step(scheduler, run)
    for i in (1, 2):
        scheduler.add_request(
            make_request(f"r{i}", 60, max_tokens=40, priority=0, arrival_time=1000.0 + i)
        )
    for _ in range(400):
        if not scheduler.has_requests():
            return run
        step(scheduler, run)
    raise AssertionError("scheduler still busy after 400 steps")


def test_priority_policy_against_vllm_priority_mode(make_scheduler: Any) -> None:
    stock = _self_preemption(make_scheduler(cls=VllmScheduler, num_blocks=10, policy="priority"))
    ours = _self_preemption(make_scheduler({"policy": ["priority"]}, num_blocks=10))
    at = next(i for i, preempted in enumerate(stock.preempted) if preempted)
    assert stock.preempted[at] == ours.preempted[at] == ["r0"]
    assert stock.steps[:at] == ours.steps[:at]
    assert set(stock.finished) == set(ours.finished) == {"r0", "r1", "r2"}
    if parse_version(vllm.__version__)[:2] < (0, 33):
        assert ours.steps == stock.steps
        assert ours.preempted == stock.preempted
    else:
        # vLLM goes on to r1 after r0 preempted itself; FCFS mode (the adapter's) stops.
        assert stock.steps[at] == {"r1": 1}
        assert ours.steps[at] == {}
        assert len(ours.steps) == len(stock.steps) + 1
