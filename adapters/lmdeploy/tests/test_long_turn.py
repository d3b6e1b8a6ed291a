"""LMDeploy's prefill turns, on its real scheduler, with the adapter in place.

While a prompt longer than ``max_prefill_token_num`` waits (a *long* prompt: LMDeploy
prefills it in chunks), LMDeploy's engine loop alternates prefill turns that admit only
the other prompts, shortest first, with turns reserved for long work
(``Scheduler.schedule(prefer_long_prefill=True)``): such a turn admits one long prompt's
first chunk, chosen by LMDeploy's ``_PrefillReorderer``: the fewest chunks first (aged by
``LMDEPLOY_PT_TTFT_AGING_SEC``), then the oldest. These are the behaviours LMDeploy's
own ``tests/pytorch/paging`` check; LMDeploy publishes no source distribution, so these
tests are our own, on the same public ``Scheduler`` calls.

Each runs three ways: no schedkit config (no runtime on the scheduler), ``fcfs`` (no
ordering hook: LMDeploy's order) and ``priority`` (an ordering policy). The adapter
keeps LMDeploy's lanes and lets the policy order within each: a long turn admits the
first long prompt in the policy's order, never a shorter one; a turn that excludes long
prompts admits the others in the policy's order.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from schedkit import Policy, PolicyFacade, PolicyRegistry, hookimpl

from schedkit_lmdeploy import patches
from schedkit_lmdeploy.harness.modelless import build_scheduler

BLOCK = 4
CHUNK = 2 * BLOCK  # max_prefill_token_num: a prompt above it is long
CONFIGS = ["no config", "fcfs", "priority"]
_tokens = itertools.count(1)


def scheduler_with(config: str, num_blocks: int = 8) -> Any:
    scheduler = build_scheduler(num_blocks, BLOCK, max_batches=2, max_prefill_tokens=CHUNK)
    if config != "no config":
        policy = PolicyRegistry.discover().load(config)()
        patches.install(scheduler, PolicyFacade([(config, policy)]))
    return scheduler


def waiting(scheduler: Any, num_tokens: int, priority: int = 0) -> Any:
    """A new request of ``num_tokens`` distinct prompt tokens (no shared prefix)."""
    import numpy as np

    session = scheduler.add_session(len(scheduler.sessions))
    ids = np.array([next(_tokens) for _ in range(num_tokens)])
    if getattr(scheduler, "schedkit", None) is None:  # LMDeploy's own add_sequence
        return session.add_sequence(ids)
    return session.add_sequence(ids, schedkit_meta={"priority": priority})


def still_waiting(*seqs: Any) -> bool:
    from lmdeploy.pytorch.messages import MessageStatus

    return all(s.status == MessageStatus.WAITING and s.num_blocks == 0 for s in seqs)


def ids(seqs: Any) -> list[int]:
    return [int(seq.seq_id) for seq in seqs]


def long_turn(scheduler: Any) -> list[int]:
    """The ids of what a turn for long work admits."""
    assert scheduler.has_waiting_long_prefill()
    return ids(scheduler.schedule(is_prefill=True, prefer_long_prefill=True).running)


def admitted_first_chunk(seq: Any) -> bool:
    return bool(seq.kv_token_limit == CHUNK and seq.num_blocks == CHUNK // BLOCK)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_long_turn_admits_the_oldest_long_waiter_first(config: str) -> None:
    scheduler = scheduler_with(config)
    first_short = waiting(scheduler, 3)
    old_long = waiting(scheduler, 5 * BLOCK)
    later_short = waiting(scheduler, 2)
    new_long = waiting(scheduler, 5 * BLOCK)
    assert long_turn(scheduler) == ids([old_long])
    assert admitted_first_chunk(old_long)
    assert still_waiting(first_short, later_short, new_long)
    assert new_long.kv_token_limit is None


@pytest.mark.parametrize("config", ["no config", "fcfs"])
def test_among_long_waiters_lmdeploy_admits_the_smaller_first(config: str) -> None:
    """LMDeploy's size rule (``LMDEPLOY_PT_TTFT_POLICY=size``, its default): the prompt of
    fewer chunks goes first, though it arrived later."""
    scheduler = scheduler_with(config)
    assert scheduler._prefill_scheduler._long_prefill_policy == "size"
    huge = waiting(scheduler, 16 * BLOCK)
    moderate = waiting(scheduler, 4 * BLOCK)
    short = waiting(scheduler, 2)
    assert long_turn(scheduler) == ids([moderate])
    assert admitted_first_chunk(moderate)
    assert still_waiting(huge, short)


def test_among_equal_priority_long_waiters_priority_admits_the_oldest() -> None:
    """An ordering policy's order replaces LMDeploy's size rule within the long lane, as
    it replaces shortest-first among the others: ``priority`` breaks ties by arrival.
    Still a long prompt: the short one waits."""
    scheduler = scheduler_with("priority")
    huge = waiting(scheduler, 16 * BLOCK)
    moderate = waiting(scheduler, 4 * BLOCK)
    short = waiting(scheduler, 2)
    assert long_turn(scheduler) == ids([huge])
    assert admitted_first_chunk(huge)
    assert still_waiting(moderate, short)


def test_priority_gives_the_long_turn_to_the_best_long_waiter_never_a_short_one() -> None:
    """Short prompts of the best priority wait for a turn that admits them; the long
    turn goes to the long prompt of the best priority (lower value first)."""
    scheduler = scheduler_with("priority")
    urgent_shorts = [waiting(scheduler, 3, priority=0) for _ in range(2)]
    old_long = waiting(scheduler, 4 * BLOCK, priority=5)
    better_long = waiting(scheduler, 6 * BLOCK, priority=1)
    assert long_turn(scheduler) == ids([better_long])
    assert admitted_first_chunk(better_long)
    assert still_waiting(old_long, *urgent_shorts)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_turn_without_long_prompts_keeps_its_lane(config: str) -> None:
    """The short-only turn (LMDeploy's TTFT turn while a long prompt waits) admits short
    prompts only: shortest first without an ordering policy, by priority with one."""
    scheduler = scheduler_with(config)
    longer = waiting(scheduler, 5, priority=0)
    long = waiting(scheduler, 4 * BLOCK, priority=0)
    shorter = waiting(scheduler, 2, priority=3)
    tiny = waiting(scheduler, 1, priority=3)
    output = scheduler.schedule(is_prefill=True, allow_long_prefill=False)
    want = [longer, shorter] if config == "priority" else [tiny, shorter]
    assert ids(output.running) == ids(want)
    assert still_waiting(long)


class Abstains(Policy):
    """An ordering policy that has no opinion on this queue."""

    @hookimpl
    def order_waiting(self) -> None:
        return None


TURNS = {  # LMDeploy's turn flags (allow_long_prefill, prefer_long_prefill) -> admitted
    "standard": ((True, False), [0]),  # by arrival; a long prompt's chunk ends the batch
    "short only": ((False, False), [4, 3]),  # shortest first, long prompts skipped
    "long first": ((True, True), [2]),  # the long prompt of fewer chunks, alone
}


@pytest.mark.parametrize("turn", TURNS)
def test_an_ordering_policy_without_an_opinion_keeps_lmdeploys_order(turn: str) -> None:
    """No opinion is LMDeploy's order on every turn, not the queue by arrival."""
    (allow_long, prefer_long), want = TURNS[turn]
    for policy in (None, Abstains()):
        scheduler = build_scheduler(8, BLOCK, max_batches=2, max_prefill_tokens=CHUNK)
        if policy is not None:
            patches.install(scheduler, PolicyFacade([("abstains", policy)]))
        seqs = [waiting(scheduler, n) for n in (16 * BLOCK, 7, 4 * BLOCK, 2, 1)]
        running = scheduler.schedule(
            is_prefill=True, allow_long_prefill=allow_long, prefer_long_prefill=prefer_long
        ).running
        assert [seqs.index(s) for s in running] == want, policy


def test_the_launch_warning_says_what_a_long_turn_does_with_the_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        scheduler_with("priority")
    text = caplog.text
    assert "waiting_key" in text and "lmdeploy" in text
    assert "long prompt" in text and "replaces LMDeploy's" in text
