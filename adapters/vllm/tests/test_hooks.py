"""Each schedkit hook observably changes (or observes) the real vLLM scheduler."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conftest import Run, VllmScheduler, free_blocks, make_request, run_until_idle, step
from schedkit import (
    Admission,
    BatchBudget,
    BlockView,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)
from vllm.v1.engine import FinishReason

from schedkit_vllm.views import VllmBlockView

# -- admission ------------------------------------------------------------------------


class RejectLong(Policy):
    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if request.num_prompt_tokens > 100:
            return Admission.reject(f"prompt of {request.num_prompt_tokens} tokens > 100")
        return None


class Finishes(Policy):
    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.reasons: dict[str, str] = {}

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        assert request.request_id not in self.reasons, "finished twice"
        self.reasons[request.request_id] = reason


def test_rejected_request_is_finished_visibly_and_counted(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("reject-long", RejectLong)
    register_policy("finishes", Finishes)
    scheduler = make_scheduler({"policy": ["reject-long", "finishes"]})
    initial = free_blocks(scheduler)
    scheduler.add_request(make_request("long", 300))
    assert scheduler.has_requests(), "the rejection must still reach the client"
    for i in range(3):
        scheduler.add_request(make_request(f"short{i}", 30, max_tokens=4))
    run = run_until_idle(scheduler)
    assert run.finished["long"] == (FinishReason.ABORT, "rejected: prompt of 300 tokens > 100")
    assert "long" not in run.admitted
    assert all(run.finished[f"short{i}"][0] == FinishReason.LENGTH for i in range(3))
    runtime = scheduler.schedkit
    assert runtime.num_rejected == 1
    assert runtime.rejections == Counter({"prompt of 300 tokens > 100": 1})
    finishes = runtime.facade.policies[1][1]
    assert finishes.reasons == {"long": "rejected", **{f"short{i}": "length" for i in range(3)}}
    assert free_blocks(scheduler) == initial
    assert runtime.views == {}, "views are dropped when requests finish"


def test_lone_rejected_request_gets_its_output(make_scheduler: Any, register_policy: Any) -> None:
    register_policy("reject-long", RejectLong)
    scheduler = make_scheduler({"policy": ["reject-long"]})
    scheduler.add_request(make_request("long", 300))
    run = run_until_idle(scheduler)
    assert run.finished == {"long": (FinishReason.ABORT, "rejected: prompt of 300 tokens > 100")}
    assert not scheduler.has_requests()


# -- waiting-queue order ----------------------------------------------------------------

PROMPTS = {"a": 300, "b": 200, "c": 10, "d": 120, "e": 40, "f": 20}


def _admission_order(scheduler: Any) -> list[str]:
    for i, (name, length) in enumerate(PROMPTS.items()):
        scheduler.add_request(make_request(name, length, max_tokens=2, arrival_time=1000.0 + i))
    return run_until_idle(scheduler).admitted


def test_ordering_policy_changes_admission_order(make_scheduler: Any) -> None:
    stock = _admission_order(make_scheduler(cls=VllmScheduler, max_num_seqs=1))
    # `shortest-prompt` comes from the example plugin (plugins/example), installed
    # in this environment: selected by config like any third-party policy.
    ours = _admission_order(make_scheduler({"policy": "shortest-prompt"}, max_num_seqs=1))
    assert stock == ["a", "b", "c", "d", "e", "f"]
    assert ours == ["c", "f", "e", "d", "b", "a"]


def test_priority_policy_orders_by_priority_then_arrival(make_scheduler: Any) -> None:
    scheduler = make_scheduler({"policy": ["priority"]}, max_num_seqs=1)
    for i, prio in enumerate([0, 3, 1, 3, 0, 2]):
        scheduler.add_request(
            make_request(f"p{i}", 20, max_tokens=2, priority=prio, arrival_time=1000.0 + i)
        )
    assert run_until_idle(scheduler).admitted == ["p0", "p4", "p2", "p5", "p1", "p3"]


# -- batch formation ----------------------------------------------------------------------


class SmallSteps(Policy):
    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        return dataclasses.replace(default, token_budget=24, max_running=2)


def test_plan_batch_limits_each_step_and_is_restored(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("small-steps", SmallSteps)
    scheduler = make_scheduler({"policy": ["small-steps"]})
    for i in range(5):
        scheduler.add_request(make_request(f"r{i}", 50, max_tokens=5))
    run = Run()
    while scheduler.has_requests():
        step(scheduler, run)
        assert len(scheduler.running) <= 2
    assert max(sum(s.values()) for s in run.steps) == 24
    assert scheduler.max_num_scheduled_tokens == 512
    assert scheduler.max_num_active_reqs == 16
    assert len(run.finished) == 5


# -- preemption victims -----------------------------------------------------------------


class FirstAdmittedVictim(Policy):
    """The opposite of vLLM's FCFS default: preempt the earliest running request first."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.calls = 0

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView
    ) -> list[RequestView]:
        self.calls += 1
        return [r for r in running if r is not needing]


def _pressure(scheduler: Any) -> Run:
    # Four 64-token prompts fill the 16 usable blocks: the first decode step runs out,
    # and r0, first in vLLM's running order, is the first to need a block.
    initial = free_blocks(scheduler)
    for i in range(4):
        scheduler.add_request(make_request(f"r{i}", 64, max_tokens=40, arrival_time=1000.0 + i))
    run = run_until_idle(scheduler)
    assert free_blocks(scheduler) == initial
    assert len(run.finished) == 4
    return run


def test_victim_policy_chooses_who_is_preempted(make_scheduler: Any, register_policy: Any) -> None:
    register_policy("first-victim", FirstAdmittedVictim)
    stock = _pressure(make_scheduler(cls=VllmScheduler, num_blocks=17))
    scheduler = make_scheduler({"policy": ["first-victim"]}, num_blocks=17)
    ours = _pressure(scheduler)
    first_stock = next(p for p in stock.preempted if p)
    first_ours = next(p for p in ours.preempted if p)
    assert first_stock == ["r3"]  # vLLM FCFS: the last admitted
    assert first_ours == ["r1"]  # the earliest running request after the one needing blocks
    policy = scheduler.schedkit.facade.policies[0][1]
    assert policy.calls >= 1
    assert scheduler.schedkit.num_victims_placed >= 1


def test_priority_policy_preempts_worst_priority(make_scheduler: Any) -> None:
    def run(scheduler: Any) -> list[str]:
        for i, prio in enumerate([0, 5, 0, 0]):
            scheduler.add_request(
                make_request(f"r{i}", 64, max_tokens=40, priority=prio, arrival_time=1000.0 + i)
            )
        result = run_until_idle(scheduler)
        return next(p for p in result.preempted if p)

    assert run(make_scheduler(cls=VllmScheduler, num_blocks=17)) == ["r3"]
    assert run(make_scheduler({"policy": ["priority"]}, num_blocks=17)) == ["r1"]


# -- KV eviction -----------------------------------------------------------------------


class MostRecentFirst(Policy):
    """Evict the most recently used cached blocks first (LRU's opposite)."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.seen: list[tuple[int, int]] = []

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        self.seen.append((len(candidates), num_blocks))
        return list(reversed(candidates))[:num_blocks]


def _prefix(seed: int) -> list[int]:
    return [seed * 100 + t for t in range(64)]  # 4 full blocks


def _cache_hit_after_pressure(scheduler: Any) -> int:
    # Cache prefix A, then B (A is least recently used), then a request that needs
    # evictions, then A again: how many of A's tokens are still cached?
    for name, prompt in (("A", _prefix(1)), ("B", _prefix(2)), ("big", _prefix(3) + _prefix(4))):
        scheduler.add_request(make_request(name, [*prompt, 1], max_tokens=1))
        run_until_idle(scheduler)
    scheduler.add_request(make_request("A2", [*_prefix(1), 2], max_tokens=1))
    output = scheduler.schedule()
    hit = {new.req_id: new.num_computed_tokens for new in output.scheduled_new_reqs}["A2"]
    return int(hit)


def test_eviction_policy_chooses_which_cached_blocks_go(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("mru", MostRecentFirst)
    # 14 usable blocks: A and B (5 blocks each) stay cached; `big` needs 9.
    # vLLM's LRU frees each request's blocks tail first, so both prefixes lose blocks.
    assert _cache_hit_after_pressure(make_scheduler(cls=VllmScheduler, num_blocks=15)) == 16
    scheduler = make_scheduler({"policy": ["mru"]}, num_blocks=15)
    assert _cache_hit_after_pressure(scheduler) == 64  # B went instead
    policy = scheduler.schedkit.facade.policies[0][1]
    assert policy.seen and all(n <= c for c, n in policy.seen)
    assert scheduler.schedkit.eviction.num_evicted_by_policy > 0


def test_eviction_candidates_are_the_oldest_blocks_of_the_window(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("mru", MostRecentFirst)
    scheduler = make_scheduler({"policy": ["mru"]}, num_blocks=15)
    hook = scheduler.schedkit.eviction
    hook.eviction_window = 0  # every cached block, as before the window
    _cache_hit_after_pressure(scheduler)
    pool = scheduler.kv_cache_manager.block_pool
    queue = pool.free_block_queue.get_all_free_blocks()
    cached = [b for b in queue if b.block_hash is not None]
    assert len(cached) == 9
    assert queue[:4] == cached[:4]  # after `big`, the queue starts with cached blocks
    policy = scheduler.schedkit.facade.policies[0][1]
    policy.seen.clear()
    hook.eviction_window = 2  # max(2, 4 x 1): the 4 oldest cached blocks of 9
    [block] = pool.get_new_blocks(1)
    assert policy.seen == [(4, 1)]
    assert block is cached[3]  # the most recent of the four
    pool.free_blocks([block])


class RecordBlocks(Policy):
    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.candidates: list[list[tuple[int, int, float]]] = []

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView]) -> None:
        self.candidates.append([(b.depth, b.num_hits, b.last_access) for b in candidates])


def test_block_views_carry_depth_hits_and_access_time(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("record", RecordBlocks)
    scheduler = make_scheduler({"policy": ["record"]}, num_blocks=15)
    assert _cache_hit_after_pressure(scheduler) == 16  # None answers: vLLM's LRU
    first = scheduler.schedkit.facade.policies[0][1].candidates[0]
    assert {depth for depth, _, _ in first} >= {0, 1, 2, 3}
    assert all(last > 0 for _, _, last in first)


class SeesHashes(Policy):
    """Records each arriving request's block hashes and every eviction candidate."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.requests: dict[str, list[int]] = {}
        self.candidates: dict[int, int] = {}  # block hash -> depth

    @hookimpl
    def admit_request(self, request: RequestView) -> None:
        self.requests[request.request_id] = list(request.block_hashes)

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView]) -> None:
        self.candidates.update((b.block_hash, b.depth) for b in candidates)


def test_a_waiting_request_lists_the_hashes_of_the_cached_blocks_it_shares(
    make_scheduler: Any, register_policy: Any
) -> None:
    register_policy("hashes", SeesHashes)
    scheduler = make_scheduler({"policy": ["hashes"]}, num_blocks=15)
    # as in _cache_hit_after_pressure: A, B, then `big` evicts (LRU: tail first)
    for name, prompt in (("A", _prefix(1)), ("B", _prefix(2)), ("big", _prefix(3) + _prefix(4))):
        scheduler.add_request(make_request(name, [*prompt, 1], max_tokens=1))
        run_until_idle(scheduler)
    scheduler.add_request(make_request("A2", [*_prefix(1), 2], max_tokens=1))
    policy = scheduler.schedkit.facade.policies[0][1]
    a, a2 = policy.requests["A"], policy.requests["A2"]
    assert len(a) == len(a2) == 4 and a == a2  # 64 shared tokens: 4 full blocks
    assert not set(policy.requests["B"]) & set(a)
    # A's blocks were eviction candidates when `big` came: the same hashes, in depth order
    assert [policy.candidates.get(h) for h in a] == [0, 1, 2, 3]
    # A2 waits: its hashes name the cached blocks it will hit (LRU kept A's first one)
    pool = scheduler.kv_cache_manager.block_pool
    cached = {
        VllmBlockView(b, pool.hash_block_size).block_hash
        for b in pool.free_block_queue.get_all_free_blocks()
        if b.block_hash is not None
    }
    waiting = scheduler.schedkit.view(scheduler.requests["A2"])
    assert list(waiting.block_hashes) == a2
    assert [h in cached for h in a2] == [True, False, False, False]
    output = scheduler.schedule()
    hit = {new.req_id: new.num_computed_tokens for new in output.scheduled_new_reqs}["A2"]
    assert hit == 16


# -- observation ------------------------------------------------------------------------
# -- observation ------------------------------------------------------------------------


class Meter(Policy):
    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.reports: list[StepReport] = []
        self.tenants: Counter[str] = Counter()

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        self.reports.append(report)
        for request, tokens in zip(report.scheduled, report.num_scheduled_tokens, strict=True):
            self.tenants[request.tenant] += tokens


def test_step_reports_match_vllm_outputs(make_scheduler: Any, register_policy: Any) -> None:
    register_policy("meter", Meter)
    scheduler = make_scheduler({"policy": ["meter"]})
    scheduler.add_request(make_request("x", 40, max_tokens=3, tenant="acme", slo_ttft_ms=200))
    scheduler.add_request(make_request("y", 30, max_tokens=3))
    run = run_until_idle(scheduler)
    meter = scheduler.schedkit.facade.policies[0][1]
    assert len(meter.reports) == len(run.steps)
    assert meter.tenants == Counter({"acme": 40 + 2, "default": 30 + 2})
    first = meter.reports[0]
    assert (first.num_prefill_tokens, first.num_decode_tokens) == (70, 0)
    assert meter.reports[1].num_decode_tokens == 2
    assert all(r.duration_s >= 0 for r in meter.reports)


def test_victim_hook_is_in_place_only_in_steps_that_may_preempt(
    make_scheduler: Any, register_policy: Any
) -> None:
    # With blocks to spare no running request can fail to allocate: the step runs vLLM's
    # own allocate_slots (no wrapper call per request). Under pressure the wrapper is
    # there for the step, and removed after it.
    register_policy("first-victim", FirstAdmittedVictim)
    for blocks, wrapped in ((2000, False), (17, True)):
        scheduler = make_scheduler({"policy": ["first-victim"]}, num_blocks=blocks)
        manager = scheduler.kv_cache_manager
        seen: list[bool] = []
        pool = manager.block_pool
        get_new_blocks = pool.get_new_blocks

        def spy(
            *args: Any,
            _seen: list[bool] = seen,
            _manager: Any = manager,
            _get: Any = get_new_blocks,
            **kwargs: Any,
        ) -> Any:
            _seen.append("allocate_slots" in _manager.__dict__)  # the wrapper, this step
            return _get(*args, **kwargs)

        pool.get_new_blocks = spy
        run = _pressure(scheduler)
        assert "allocate_slots" not in manager.__dict__
        assert seen and any(seen) is wrapped
        if wrapped:
            assert any(p for p in run.preempted)
            assert scheduler.schedkit.num_victims_placed >= 1
