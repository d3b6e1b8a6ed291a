"""SimEngine: invariants under random workloads, determinism, stretched runs equal to
step-by-step ones, vLLM V1 scheduling semantics, policies through the facade, and cost
that grows with events rather than decode steps.

Hand-built scenarios use ``TEN_MS`` (every step takes 10 ms) and 16-token blocks, so
their times and step counts are exact. Known engine bugs have strict xfail tests at the
end; the property tests step around them narrowly (see ``ProbedEngine``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest
from _fixtures import (
    LINEAR,
    ROOFLINE,
    TEN_MS,
    EvictNewestFirst,
    Faulty,
    Observer,
    OldestOtherVictim,
    ProbedEngine,
    RejectLongPrompts,
    ShortestPromptFirst,
    TokenBudget,
    assert_drained,
    by_id,
    configs,
    cost_models,
    counters,
    engine,
    fits,
    record_diffs,
    req,
    workloads,
)
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from schedkit import BatchBudget, EngineState, EngineView, Policy, RequestView, hookimpl
from schedkit.hookspecs import HOOK_NAMES
from schedkit.policies.builtin import PriorityPolicy
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import SimEngine
from schedkit.sim.kv.blocks import own_block_hash
from schedkit.sim.request import SimRequest
from schedkit.workload import TraceRequest, load_workload

PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fcfs() -> list[tuple[str, Policy]]:
    return []


def priority() -> list[tuple[str, Policy]]:
    return [("priority", PriorityPolicy())]


PolicyFactory = Callable[[], list[tuple[str, Policy]]]
POLICIES: dict[str, PolicyFactory] = {"fcfs": fcfs, "priority": priority}


def run_probed(
    requests: Sequence[TraceRequest],
    config: SimConfig,
    policies: Sequence[tuple[str, Policy]] = (),
    *,
    cost: StepCost = TEN_MS,
    stretch: bool = True,
) -> tuple[RunResult, ProbedEngine]:
    """Run with invariants checked after every step."""
    eng = engine(requests, config, policies, cost=cost, stretch=stretch)
    result = eng.run()
    if not currently_in_test_context():
        return result, eng
    event(f"stretch={stretch}")
    for what, happened in (
        ("preemption", result.preemptions),
        ("eviction", eng.kv.evictions),
        ("prefix hit", result.prefix_hit_tokens),
        ("rejection", result.rejections),
    ):
        if happened:
            event(what)
    return result, eng


# == properties ==========================================================================


@PROPERTY
@given(
    requests=workloads(),
    config=configs(),
    cost=cost_models,
    stretch=st.booleans(),
)
def test_fcfs_loses_no_request_and_conserves_kv_blocks(
    requests: list[TraceRequest], config: SimConfig, cost: StepCost, stretch: bool
) -> None:
    check_no_request_lost_and_blocks_conserved(requests, config, fcfs(), cost, stretch)


@PROPERTY
@given(
    requests=workloads(),
    config=configs(),
    cost=cost_models,
    stretch=st.booleans(),
)
def test_priority_loses_no_request_and_conserves_kv_blocks(
    requests: list[TraceRequest], config: SimConfig, cost: StepCost, stretch: bool
) -> None:
    check_no_request_lost_and_blocks_conserved(requests, config, priority(), cost, stretch)


@PROPERTY
@given(
    requests=workloads(),
    config=configs(),
    window=st.integers(1, 6),
    stretch=st.booleans(),
)
def test_a_small_eviction_window_loses_no_request_and_conserves_kv_blocks(
    requests: list[TraceRequest], config: SimConfig, window: int, stretch: bool
) -> None:
    config = config.model_copy(update={"eviction_window": window})
    newest_first = EvictNewestFirst()
    policies: list[tuple[str, Policy]] = [("mru", newest_first)]
    check_no_request_lost_and_blocks_conserved(requests, config, policies, TEN_MS, stretch)
    for candidates, needed in newest_first.calls:
        assert needed <= len(candidates) <= max(window, 4 * needed)


@PROPERTY
@given(requests=workloads(), config=configs(), stretch=st.booleans())
def test_an_eviction_window_covering_the_cache_changes_nothing(
    requests: list[TraceRequest], config: SimConfig, stretch: bool
) -> None:
    """A window of the whole cache (``num_blocks``) offers every evictable block, as
    ``eviction_window=0`` does: the same candidates, decisions and records."""
    runs = []
    for window in (0, config.num_blocks):
        newest_first = EvictNewestFirst()
        windowed = config.model_copy(update={"eviction_window": window})
        result, _ = run_probed(requests, windowed, [("mru", newest_first)], stretch=stretch)
        runs.append((result, newest_first.calls))
    (unbounded, calls), (covering, covering_calls) = runs
    assert covering_calls == calls
    assert record_diffs(unbounded.records, covering.records) == []
    assert counters(unbounded) == counters(covering)


def check_no_request_lost_and_blocks_conserved(
    requests: list[TraceRequest],
    config: SimConfig,
    policies: list[tuple[str, Policy]],
    cost: StepCost,
    stretch: bool,
) -> None:
    observer = Observer()
    result, eng = run_probed(
        requests, config, [*policies, ("observer", observer)], cost=cost, stretch=stretch
    )
    assert_drained(eng)  # blocks were checked after every step too (check_invariants)
    records = by_id(result)
    assert list(records) == [r.request_id for r in requests]
    completed = [r for r in result.records if r.finish_reason == "length"]
    rejected = [r for r in result.records if r.rejected]
    assert len(completed) + len(rejected) == len(requests)
    assert sum(result.rejections.values()) == len(rejected)
    assert sorted(observer.finished) == sorted(
        (r.request_id, r.finish_reason) for r in result.records
    )
    for trace in requests:
        rec = records[trace.request_id]
        assert rec.rejected == (not fits(trace, config))  # only the KV capacity rejects
        if rec.rejected:
            assert "KV blocks" in rec.reject_reason
            assert rec.scheduled_s is None and rec.first_token_s is None
            assert rec.output_tokens == 0
            continue
        assert rec.output_tokens == rec.max_tokens == max(1, trace.output_tokens)
        assert rec.scheduled_s is not None and rec.finish_s is not None
        assert rec.arrival_s <= rec.scheduled_s <= rec.finish_s <= result.duration_s
        assert rec.first_token_s is not None
        assert rec.scheduled_s <= rec.first_token_s <= rec.finish_s
        assert rec.first_token_s >= rec.arrival_s
        assert 0 <= rec.cached_tokens < rec.prompt_tokens
        assert rec.cached_tokens % config.block_size == 0
    # The clock stops at the last completion, or at a later arrival that was rejected.
    ends = [r.finish_s or 0.0 for r in completed] + [r.arrival_s for r in rejected]
    assert result.duration_s == max(ends)
    assert result.steps == sum(s.num_steps for s in observer.steps)
    assert result.preemptions == sum(r.preemptions for r in result.records)
    assert result.preemptions == sum(len(s.preempted) for s in observer.steps)
    assert 0 <= result.prefix_hit_tokens <= result.prefix_query_tokens
    if not config.enable_prefix_caching:
        assert result.prefix_hit_tokens == 0
    assert 0.0 <= result.kv_usage_mean <= 1.0
    assert result.policy_errors == 0


@PROPERTY
@given(requests=workloads(), config=configs())
def test_scheduled_tokens_add_up(requests: list[TraceRequest], config: SimConfig) -> None:
    """Every token is computed once, plus recomputation after preemption, minus prefix
    hits; step reports add up to the result's steps."""
    observer = Observer()
    result, _ = run_probed(requests, config, [("observer", observer)], cost=LINEAR)
    assert sum(s.num_steps for s in observer.steps) == result.steps
    assert sum(s.duration_s for s in observer.steps) <= result.duration_s * (1 + 1e-9)
    computed = 0
    for s in observer.steps:
        assert s.prefill + s.decode == sum(s.num_tokens)
        assert all(n > 0 for n in s.num_tokens)
        if s.num_steps == 1:
            assert len(s.scheduled) == len(set(s.scheduled)) == len(s.num_tokens)
        else:  # a run of identical decode steps (its ids: test_step_report_of_a_run_...)
            assert s.prefill == 0 and set(s.num_tokens) == {s.num_steps}
        assert len(s.num_tokens) <= config.max_num_seqs
        assert sum(s.num_tokens) <= config.max_num_batched_tokens * s.num_steps
        computed += sum(s.num_tokens)
    done = [r for r in result.records if not r.rejected]
    needed = sum(r.prompt_tokens + r.max_tokens - 1 for r in done)
    expected = needed - result.prefix_hit_tokens + result.recomputed_tokens
    if config.hash_block_tokens == 0 or not config.enable_prefix_caching:
        assert computed == expected
    else:  # a re-admitted request may find more of its prefix cached than it had computed
        assert computed <= expected


@PROPERTY
@given(
    requests=workloads(),
    config=configs(),
    cost=cost_models,
    policy=st.sampled_from(sorted(POLICIES)),
    stretch=st.booleans(),
)
def test_same_inputs_give_the_same_run(
    requests: list[TraceRequest], config: SimConfig, cost: StepCost, policy: str, stretch: bool
) -> None:
    first, _ = run_probed(requests, config, POLICIES[policy](), cost=cost, stretch=stretch)
    second, _ = run_probed(requests, config, POLICIES[policy](), cost=cost, stretch=stretch)
    assert record_diffs(first.records, second.records) == []
    assert counters(first) == counters(second)


def assert_stretch_matches_steps(
    requests: Sequence[TraceRequest],
    config: SimConfig,
    policy: str,
    cost: StepCost,
) -> tuple[RunResult, RunResult]:
    stretched, eng = run_probed(requests, config, POLICIES[policy](), cost=cost, stretch=True)
    stepped, step_eng = run_probed(requests, config, POLICIES[policy](), cost=cost, stretch=False)
    assert record_diffs(stretched.records, stepped.records, rel=1e-9) == []
    for name in (
        "steps",
        "preemptions",
        "recomputed_tokens",
        "prefix_query_tokens",
        "prefix_hit_tokens",
        "rejections",
    ):
        assert getattr(stretched, name) == getattr(stepped, name), name
    assert stretched.duration_s == pytest.approx(stepped.duration_s, rel=1e-9)
    gaps = sum(r.output_tokens - 1 for r in stepped.records if not r.rejected)
    assert sum(n for _, n in stepped.itl) == gaps
    assert sum(n for _, n in stretched.itl) == gaps
    assert step_eng.iterations == stepped.steps
    assert eng.iterations <= step_eng.iterations
    # A stretched run integrates KV usage as a ramp, stepping as a staircase: they differ
    # by up to half a block per running request, which matters only for tiny caches.
    slack = step_eng.peak_running / (2 * config.num_blocks)
    assert abs(stretched.kv_usage_mean - stepped.kv_usage_mean) <= (
        0.02 * stepped.kv_usage_mean + slack
    )
    return stretched, stepped


@PROPERTY
@given(
    requests=workloads(),
    config=configs(),
    cost=cost_models,
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_stretched_runs_equal_step_by_step_runs(
    requests: list[TraceRequest], config: SimConfig, cost: StepCost, policy: str
) -> None:
    assert_stretch_matches_steps(requests, config, policy, cost)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_stretched_run_of_the_azure_trace_under_kv_pressure(policy: str) -> None:
    requests = load_workload("azure-conv").scaled(3).truncated(2000).requests
    config = SimConfig(num_blocks=3000)
    result, stepped = assert_stretch_matches_steps(requests, config, policy, ROOFLINE)
    assert result.preemptions > 0 and result.recomputed_tokens > 0
    assert not result.rejections
    assert result.kv_usage_mean == pytest.approx(stepped.kv_usage_mean, rel=0.02)


# == vLLM V1 semantics, by hand ==========================================================


@pytest.mark.parametrize("stretch", [True, False])
def test_fcfs_admits_in_arrival_order(stretch: bool) -> None:
    requests = [
        req("r0", 0.0, 16, 3),
        req("r1", 0.001, 200, 3),
        req("r2", 0.002, 16, 3),
    ]
    config = SimConfig(num_blocks=100, max_num_seqs=1)
    recs = by_id(engine(requests, config, stretch=stretch).run())
    # One at a time: prefill (first token) then two decode steps of 10 ms each.
    for i, rid in enumerate(("r0", "r1", "r2")):
        t0 = 0.03 * i
        assert recs[rid].scheduled_s == pytest.approx(t0)
        assert recs[rid].first_token_s == pytest.approx(t0 + 0.01)
        assert recs[rid].finish_s == pytest.approx(t0 + 0.03)


@pytest.mark.parametrize("stretch", [True, False])
def test_running_requests_are_scheduled_before_waiting_ones(stretch: bool) -> None:
    observer = Observer()
    requests = [req("r0", 0.0, 64, 10), req("r1", 0.005, 40, 5)]
    config = SimConfig(num_blocks=100, max_num_batched_tokens=32)
    result = engine(requests, config, [("o", observer)], stretch=stretch).run()
    tokens = [s.tokens for s in observer.steps[:4]]
    # r1 arrived during step 1, but r0's second chunk takes the whole budget of step 2.
    assert tokens == [{"r0": 32}, {"r0": 32}, {"r0": 1, "r1": 31}, {"r0": 1, "r1": 9}]
    recs = by_id(result)
    assert recs["r0"].first_token_s == pytest.approx(0.02)
    assert recs["r1"].scheduled_s == pytest.approx(0.02)
    assert recs["r1"].first_token_s == pytest.approx(0.04)
    assert recs["r1"].finish_s == pytest.approx(0.08)
    assert recs["r0"].finish_s == pytest.approx(0.11)


@pytest.mark.parametrize("stretch", [True, False])
@pytest.mark.parametrize(
    ("budget", "threshold", "chunks"),
    [
        (32, 0, [32, 32, 32, 4]),
        (8192, 24, [100]),  # alone: the threshold does not apply (vLLM's rule)
        (32, 24, [32, 32, 32, 4]),
        (8192, 0, [100]),
    ],
)
def test_chunked_prefill_splits_a_long_prompt(
    budget: int, threshold: int, chunks: list[int], stretch: bool
) -> None:
    observer = Observer()
    config = SimConfig(
        num_blocks=100, max_num_batched_tokens=budget, long_prefill_token_threshold=threshold
    )
    result = engine([req("r0", 0.0, 100, 2)], config, [("o", observer)], stretch=stretch).run()
    assert [s.tokens["r0"] for s in observer.steps[: len(chunks)]] == chunks
    assert len(chunks) == math.ceil(100 / budget)
    [rec] = result.records
    assert rec.first_token_s == pytest.approx(0.01 * len(chunks))  # TTFT: one step per chunk
    assert rec.finish_s == pytest.approx(0.01 * (len(chunks) + 1))
    assert result.steps == len(chunks) + 1


@pytest.mark.parametrize("stretch", [True, False])
def test_the_prefill_threshold_applies_while_another_request_runs_or_waits(
    stretch: bool,
) -> None:
    # vLLM 0.32 and 0.33: long_prefill_token_threshold keeps a long prefill from starving
    # others, so it applies only when more than one request is running or waiting
    observer = Observer()
    config = SimConfig(num_blocks=100, max_num_batched_tokens=8192, long_prefill_token_threshold=24)
    requests = [req("r0", 0.0, 100, 2), req("r1", 0.0, 8, 40)]
    engine(requests, config, [("o", observer)], stretch=stretch).run()
    assert [s.tokens["r0"] for s in observer.steps[:5]] == [24, 24, 24, 24, 4]
    assert observer.steps[0].tokens["r1"] == 8
    # once r0 finishes, r1 runs alone (a decode: one token a step either way)
    lone = [
        req("a", 0.0, 100, 2),  # alone for its first step, then b waits
        req("b", 0.005, 8, 2),
    ]
    observer = Observer()
    engine(lone, config, [("o", observer)], stretch=stretch).run()
    assert observer.steps[0].tokens == {"a": 100}


@pytest.mark.parametrize("stretch", [True, False])
def test_max_num_seqs_caps_running_requests(stretch: bool) -> None:
    observer = Observer()
    requests = [req(f"r{i}", 0.0, 16, 4) for i in range(5)]
    config = SimConfig(num_blocks=100, max_num_seqs=2)
    result = engine(requests, config, [("o", observer)], stretch=stretch).run()
    assert max(len(s.num_tokens) for s in observer.steps) == 2
    assert max(s.num_running for s in observer.steps) == 2
    recs = by_id(result)
    for i, wave in enumerate((("r0", "r1"), ("r2", "r3"), ("r4",))):
        for rid in wave:
            assert recs[rid].scheduled_s == pytest.approx(0.04 * i)
            assert recs[rid].finish_s == pytest.approx(0.04 * (i + 1))
    assert result.steps == 12


def three_decoders(**priorities: int) -> list[TraceRequest]:
    """Three requests that each need 3 blocks; in 7 blocks the third block of the last
    two runs out at step 19 (r0 is one token ahead: r1 and r2 arrive during step 1)."""
    return [
        req(rid, 0.001 * i, 16, 20, priority=priorities.get(rid, 0))
        for i, rid in enumerate(("r0", "r1", "r2"))
    ]


PRESSURE = SimConfig(num_blocks=7, enable_prefix_caching=False)


@pytest.mark.parametrize("stretch", [True, False])
@pytest.mark.parametrize(
    ("policies", "priorities", "victim", "lost"),
    [
        # FCFS: the last admitted running request.
        (fcfs, {}, "r2", 32),
        # Priority: the worst priority, the newest among equals; here r1, which needs the
        # block itself and so gives up its slot (r2 is more important).
        (priority, {"r0": 1, "r1": 1, "r2": 0}, "r1", 32),
        (priority, {"r0": 2, "r1": 0, "r2": 1}, "r0", 33),  # scheduled already this step
        (priority, {}, "r2", 32),
    ],
)
def test_preemption_victim_under_kv_pressure(
    policies: PolicyFactory, priorities: dict[str, int], victim: str, lost: int, stretch: bool
) -> None:
    observer = Observer()
    requests = three_decoders(**priorities)
    eng = engine(requests, PRESSURE, [*policies(), ("o", observer)], stretch=stretch)
    result = eng.run()
    [preempted] = [s.preempted for s in observer.steps if s.preempted]
    assert preempted == (victim,)
    assert result.preemptions == 1 and by_id(result)[victim].preemptions == 1
    assert result.recomputed_tokens == lost  # all it had computed: no prefix cache
    assert all(r.output_tokens == 20 for r in result.records)
    assert_drained(eng)


@pytest.mark.parametrize("stretch", [True, False])
@pytest.mark.parametrize(("caching", "recomputed"), [(False, 32), (True, 16)])
def test_a_preempted_request_goes_back_to_the_front(
    stretch: bool, caching: bool, recomputed: int
) -> None:
    requests = [*three_decoders(), req("r3", 0.05, 8, 2)]
    config = SimConfig(num_blocks=7, max_num_seqs=3, enable_prefix_caching=caching)
    observer = Observer()
    eng = engine(requests, config, [("o", observer)], stretch=stretch, trace_waiting=True)
    result = eng.run()
    assert ["r2", "r3"] in eng.waiting_after  # preempted r2 ahead of r3, which came first
    assert ["r3", "r2"] not in eng.waiting_after
    # r3 would fit in the one free block, but FCFS admits from the front only.
    r3_first = next(i for i, s in enumerate(observer.steps) if "r3" in s.tokens)
    r2_prefills = [
        i for i, s in enumerate(observer.steps) if s.num_steps == 1 and s.tokens.get("r2", 0) > 1
    ]
    assert len(r2_prefills) == 2 and r2_prefills[1] <= r3_first
    recs = by_id(result)
    r3_scheduled, r0_finish = recs["r3"].scheduled_s, recs["r0"].finish_s
    assert r3_scheduled is not None and r0_finish is not None and r3_scheduled >= r0_finish
    # With the prefix cache, r2 finds the block of its own that was not evicted meanwhile.
    assert result.recomputed_tokens == recomputed
    assert result.prefix_hit_tokens == 0 and recs["r2"].cached_tokens == 0
    assert_drained(eng)


HASHED = SimConfig(num_blocks=100, hash_block_tokens=64)


@pytest.mark.parametrize("stretch", [True, False])
def test_prefix_cache_hits_on_shared_leading_hash_blocks(stretch: bool) -> None:
    requests = [
        req("a", 0.0, 256, 2, hash_ids=(1, 2, 3, 4)),
        req("b", 1.0, 200, 2, hash_ids=(1, 2, 9)),  # shares 2 hash blocks with a
        req("c", 2.0, 128, 2, hash_ids=(1, 2)),  # all cached, but the last token is computed
        req("d", 3.0, 129, 2, hash_ids=(1, 2)),
        req("e", 4.0, 200, 2, hash_ids=(8, 1)),  # shares nothing leading
    ]
    result = engine(requests, HASHED, stretch=stretch).run()
    cached = {r.request_id: r.cached_tokens for r in result.records}
    assert cached == {"a": 0, "b": 2 * 64, "c": 127 // 16 * 16, "d": 128, "e": 0}
    assert result.prefix_hit_tokens == sum(cached.values())
    assert result.prefix_query_tokens == 256 + 200 + 128 + 129 + 200
    # Hits save prefill: b computes only its last 72 prompt tokens.
    observer = Observer()
    engine(requests[:2], HASHED, [("o", observer)], stretch=stretch).run()
    assert next(s.tokens["b"] for s in observer.steps if "b" in s.tokens) == 200 - 128


@pytest.mark.parametrize(
    "config",
    [
        SimConfig(num_blocks=100, hash_block_tokens=64, enable_prefix_caching=False),
        SimConfig(num_blocks=100, hash_block_tokens=0),  # no hashes: nothing is shared
        SimConfig(num_blocks=100, hash_block_tokens=24),  # not a multiple of the block size
    ],
)
def test_no_prefix_hits_without_caching_or_usable_hashes(config: SimConfig) -> None:
    requests = [
        req("a", 0.0, 256, 2, hash_ids=(1, 2, 3, 4)),
        req("b", 1.0, 256, 2, hash_ids=(1, 2, 3, 4)),
    ]
    result = engine(requests, config).run()
    assert [r.cached_tokens for r in result.records] == [0, 0]
    assert result.prefix_hit_tokens == 0


class WaitingHashes(Policy):
    """Checks, whenever requests wait, that each one's ``block_hashes`` start with the
    hashes of the cached blocks it would hit now, as eviction candidates name them."""

    def __init__(self) -> None:
        super().__init__()
        self.eng: SimEngine | None = None
        self.checked: list[tuple[str, int, int]] = []  # (request, shared, own blocks hit)

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> None:
        assert self.eng is not None
        kv = self.eng.kv
        for request in waiting:
            assert isinstance(request, SimRequest)
            hit, own, _ = kv.lookup(request.blocks, request.num_tokens)
            names = tuple(own_block_hash(request.blocks.key, j) for j in range(own))
            assert tuple(request.block_hashes[hit : hit + own]) == names
            assert len(request.block_hashes) == request.num_tokens // kv.block_size
            for block_hash in request.block_hashes[:hit]:  # cached under the hash it lists
                assert kv.is_cached(block_hash)
            if hit < request.blocks.num_shared and hit < (request.num_tokens - 1) // kv.block_size:
                assert not kv.is_cached(request.block_hashes[hit])  # the first miss
            self.checked.append((request.request_id, hit, own))


def run_checking_hashes(requests: list[TraceRequest], config: SimConfig) -> WaitingHashes:
    policy = WaitingHashes()
    eng = engine(requests, config, [("hashes", policy)])
    policy.eng = eng
    eng.run()
    # a finished request's view keeps reading its last state, hashes included (the
    # contract suite checks every field on every engine: check_outcome)
    return policy


def test_a_waiting_request_lists_the_hashes_of_the_cached_blocks_it_will_hit() -> None:
    requests = [
        req("a", 0.0, 256, 2, hash_ids=(1, 2, 3, 4)),
        req("b", 1.0, 200, 2, hash_ids=(1, 2, 9)),  # a's first 2 hash ids: 8 blocks
    ]
    policy = run_checking_hashes(requests, HASHED)
    assert ("b", 8, 0) in policy.checked


@PROPERTY
@given(requests=workloads(), config=configs(min_blocks=8, max_blocks=40))
def test_waiting_requests_block_hashes_name_the_blocks_they_hit(
    requests: list[TraceRequest], config: SimConfig
) -> None:
    config = config.model_copy(update={"enable_prefix_caching": True})
    policy = run_checking_hashes(requests, config)
    if any(hit for _, hit, _ in policy.checked):
        event("a waiting request would hit shared blocks")
    if any(own for _, _, own in policy.checked):
        event("a preempted request would hit its own cached blocks")


def lru_scenario(first: int, second: int, ask: int) -> list[TraceRequest]:
    """Two one-block prefixes cached in turn, then a request whose 5 blocks need one of
    them evicted, then a request for prefix ``ask``."""
    return [
        req("first", 0.0, 17, 1, hash_ids=(first,)),
        req("second", 1.0, 17, 1, hash_ids=(second,)),
        req("big", 2.0, 65, 1),
        req("ask", 3.0, 17, 1, hash_ids=(ask,)),
    ]


LRU = SimConfig(num_blocks=6, hash_block_tokens=16)


@pytest.mark.parametrize("ask", [1, 2])
@pytest.mark.parametrize(("first", "second"), [(1, 2), (2, 1)])
def test_lru_evicts_the_least_recently_freed_prefix(first: int, second: int, ask: int) -> None:
    recs = by_id(engine(lru_scenario(first, second, ask), LRU).run())
    assert recs["ask"].cached_tokens == (16 if ask == second else 0)


def test_request_too_big_for_the_kv_cache_is_rejected() -> None:
    observer = Observer()
    requests = [req("big", 0.0, 60, 10), req("ok", 0.0, 16, 4)]  # big needs 5 of 4 blocks
    result = engine(requests, SimConfig(num_blocks=4), [("o", observer)]).run()
    recs = by_id(result)
    assert recs["big"].rejected and "KV blocks" in recs["big"].reject_reason
    assert "5" in recs["big"].reject_reason and "4" in recs["big"].reject_reason
    assert result.rejections == {recs["big"].reject_reason: 1}
    assert recs["ok"].finish_reason == "length" and recs["ok"].output_tokens == 4
    assert sorted(observer.finished) == [("big", "rejected"), ("ok", "length")]


# == policies through the facade ============================================================


def test_an_admission_policy_rejects_requests() -> None:
    observer = Observer()
    prompts = [50, 150, 80, 200, 20, 101]
    requests = [req(f"r{i}", 0.01 * i, p, 4) for i, p in enumerate(prompts)]
    requests.append(req("huge", 0.1, 90, 5000))  # over KV capacity: the engine rejects first
    policies = [("short-only", RejectLongPrompts(100)), ("o", observer)]
    result = engine(requests, SimConfig(num_blocks=64), policies).run()
    kv_reason = by_id(result)["huge"].reject_reason
    assert result.rejections == {"prompt too long": 3, kv_reason: 1}
    rejected = {r.request_id for r in result.records if r.finish_reason == "rejected"}
    assert rejected == {"r1", "r3", "r5", "huge"}
    assert all(r.output_tokens == 4 for r in result.records if r.request_id not in rejected)
    finished = sorted(observer.finished)
    assert [rid for rid, _ in finished] == sorted(r.request_id for r in requests)  # once each
    assert {rid for rid, why in finished if why == "rejected"} == rejected


@pytest.mark.parametrize("stretch", [True, False])
@pytest.mark.parametrize(
    ("policies", "order"),
    [(fcfs, ["r1", "r2", "r3"]), (lambda: [("spf", ShortestPromptFirst())], ["r3", "r2", "r1"])],
)
def test_an_ordering_policy_changes_admission_order(
    policies: PolicyFactory, order: list[str], stretch: bool
) -> None:
    requests = [
        req("r0", 0.0, 16, 5),
        req("r1", 0.001, 200, 2),
        req("r2", 0.002, 50, 2),
        req("r3", 0.003, 20, 2),
    ]
    config = SimConfig(num_blocks=100, max_num_seqs=1)
    result = engine(requests, config, policies(), stretch=stretch).run()
    waiting = [r for r in result.records if r.request_id != "r0"]
    assert [r.request_id for r in sorted(waiting, key=lambda r: r.scheduled_s or 0)] == order


@pytest.mark.parametrize("stretch", [True, False])
def test_a_victim_policy_changes_who_is_preempted(stretch: bool) -> None:
    observer = Observer()
    policies = [("oldest", OldestOtherVictim()), ("o", observer)]
    result = engine(three_decoders(), PRESSURE, policies, stretch=stretch).run()
    assert [s.preempted for s in observer.steps if s.preempted] == [("r0",)]
    assert by_id(result)["r0"].preemptions == 1 and result.preemptions == 1


@pytest.mark.parametrize("ask", [1, 2])
def test_an_eviction_policy_changes_which_prefix_survives(ask: int) -> None:
    newest_first = EvictNewestFirst()
    recs = by_id(engine(lru_scenario(1, 2, ask), LRU, [("mru", newest_first)]).run())
    # LRU keeps prefix 2 (test_lru_...); evicting the newest first keeps prefix 1.
    assert recs["ask"].cached_tokens == (16 if ask == 1 else 0)
    candidates, needed = newest_first.calls[0]
    assert candidates == [2, 4] and needed == 1  # trace ids 1, 2 as the engine encodes them


@pytest.mark.parametrize("stretch", [True, False])
def test_a_batch_policy_limiting_tokens_slows_prefill(stretch: bool) -> None:
    config = SimConfig(num_blocks=100)
    requests = [req("r0", 0.0, 100, 2)]
    fast = engine(requests, config, stretch=stretch).run()
    slow = engine(requests, config, [("small", TokenBudget(16))], stretch=stretch).run()
    assert fast.records[0].first_token_s == pytest.approx(0.01)
    assert slow.records[0].first_token_s == pytest.approx(0.07)  # ceil(100 / 16) chunks
    assert slow.steps == fast.steps + 6


def faulty_run(
    should_raise: Callable[[], bool] | None, stretch: bool
) -> tuple[RunResult, Faulty | None]:
    """300 requests of the Azure trace in a cache small enough to preempt and evict."""
    requests = load_workload("azure-conv").scaled(3).truncated(300).requests
    config = SimConfig(num_blocks=700)
    faulty = Faulty(should_raise) if should_raise else None
    policies = [("faulty", faulty)] if faulty else []
    return engine(requests, config, policies, cost=ROOFLINE, stretch=stretch).run(), faulty


@pytest.mark.parametrize("stretch", [True, False])
@pytest.mark.parametrize("rate", [1.0, 0.1])
def test_a_failing_policy_is_isolated(rate: float, stretch: bool) -> None:
    rng = random.Random(7)
    result, faulty = faulty_run(lambda: rng.random() < rate, stretch)
    assert faulty is not None
    assert set(faulty.calls) == set(HOOK_NAMES) - {
        "route_request"
    }  # the workload exercises every hook
    # (one engine routes nothing; a cluster's router: tests/sim/test_cluster.py)
    raised = sum(faulty.raised.values())
    assert raised > 0 and result.policy_errors == raised
    assert result.policy_errors_by_hook == {f"faulty.{h}": n for h, n in faulty.raised.items()}
    if rate == 1.0:
        assert faulty.raised == faulty.calls
    # The engine default decided wherever the policy failed or had no opinion.
    plain, _ = faulty_run(None, stretch)
    assert all(r.finish_reason == "length" for r in result.records)
    assert record_diffs(result.records, plain.records, rel=1e-9) == []
    assert result.steps == plain.steps and result.preemptions == plain.preemptions > 0


# == cost grows with events, not decode steps ===============================================


@pytest.mark.parametrize("cost", [ROOFLINE, LINEAR, TEN_MS])
def test_a_long_decode_is_advanced_in_one_go(cost: StepCost) -> None:
    observer = Observer()
    eng = engine(
        [req("r0", 0.0, 16, 10_000)], SimConfig(num_blocks=1000), [("o", observer)], cost=cost
    )
    result = eng.run()
    assert result.steps == 10_000 and result.records[0].output_tokens == 10_000
    assert eng.iterations == 2 and eng.decode_stretches == 1  # the prefill step, then one stretch
    assert [s.num_steps for s in observer.steps] == [1, 9_999]
    stepped = engine(
        [req("r0", 0.0, 16, 10_000)], SimConfig(num_blocks=1000), cost=cost, stretch=False
    )
    assert stepped.run().duration_s == pytest.approx(result.duration_s, rel=1e-9)
    assert stepped.iterations == 10_000


def test_loop_iterations_follow_events_at_low_load() -> None:
    requests = load_workload("poisson:rate=0.5,n=50,prompt=512,output=256,seed=1").requests
    eng = engine(requests, SimConfig(num_blocks=5000), cost=ROOFLINE)
    result = eng.run()
    outputs = sum(r.output_tokens for r in result.records)
    assert result.steps >= outputs // 2  # mostly one request at a time
    # A prefill step per request, and decode stretches cut only by arrivals and completions.
    assert eng.iterations <= 4 * len(requests) < result.steps / 10


# == known engine bugs ======================================================================


@pytest.mark.parametrize(
    ("prompt", "config", "others"),
    [
        (8193, SimConfig(num_blocks=1000), 0),  # one token over the default token budget
        (17, SimConfig(num_blocks=100, max_num_batched_tokens=16), 0),
        # the threshold chunks a prompt only while another request runs or waits
        (25, SimConfig(num_blocks=100, long_prefill_token_threshold=24), 1),
    ],
)
def test_first_token_of_a_stretched_run_is_recorded(
    prompt: int, config: SimConfig, others: int
) -> None:
    requests = [req("r0", 0.0, prompt, 4), *(req(f"o{i}", 0.0, 8, 40) for i in range(others))]
    rec = by_id(engine(requests, config, stretch=True).run())["r0"]
    assert rec.first_token_s == pytest.approx(0.02)  # after the second prefill chunk


def test_step_report_of_a_run_lists_every_request_it_computed() -> None:
    observer = Observer()
    requests = [req("r0", 0.0, 16, 5), req("r1", 0.0, 16, 10)]
    engine(requests, SimConfig(num_blocks=100), [("o", observer)]).run()
    first_run = next(s for s in observer.steps if s.num_steps > 1)
    assert first_run.num_steps == 4 and first_run.num_tokens == (4, 4)
    assert first_run.scheduled == ("r0", "r1")  # r0 finished at the end of the run


# r2 computes its hash-7 block as a private copy (r1 published it in the same step); r1
# finishes, hash 7 is evicted before r2's own run (freed later), r2 is preempted and comes
# back without a prefix hit, so its run stays cached; preempted again, it frees a new run
# under the same key, and the old run's block is lost yet still counted as free.
STALE_RUN = [
    req("r0", 0.0, 11, 42),
    req("r1", 0.0, 16, 1, hash_ids=(7,)),
    req("r2", 0.0, 29, 37, hash_ids=(7,)),
]
STALE_RUN_CONFIG = SimConfig(num_blocks=8, max_num_batched_tokens=23, hash_block_tokens=16)


def test_stale_own_run_is_not_lost_when_the_request_frees_again() -> None:
    eng = engine(STALE_RUN, STALE_RUN_CONFIG, stretch=False)
    eng.run()
    assert_drained(eng)


def test_stale_own_run_does_not_crash_a_later_request() -> None:
    requests = [*STALE_RUN, req("r3", 10.0, 120, 8)]  # r3 needs all 8 blocks
    result = engine(requests, STALE_RUN_CONFIG, check=False).run()  # a plain engine
    assert all(r.finish_reason == "length" for r in result.records)


def test_negative_hash_ids_do_not_collide_with_own_runs() -> None:
    eng = engine(
        [req("r0", 0.0, 48, 2, hash_ids=(-1,))], SimConfig(num_blocks=8, hash_block_tokens=16)
    )
    eng.run()
    assert_drained(eng)


def test_priority_makes_progress_with_tied_requests() -> None:
    requests = [req("a", 0.0, 40, 30), req("b", 0.0, 40, 30)]  # each needs 5 of 6 blocks
    config = SimConfig(
        num_blocks=6,
        max_num_batched_tokens=32,
        long_prefill_token_threshold=16,
        enable_prefix_caching=False,
    )
    eng = engine(requests, config, priority(), stretch=False, step_cap=5_000)
    result = eng.run()
    assert all(r.output_tokens == 30 for r in result.records)


@pytest.mark.parametrize("mixed", [True, False])
def test_unmixed_prefill_runs_alone_ahead_of_decode(mixed: bool) -> None:
    """SGLang's schedule (mixed_prefill=False): the step after an arrival prefills it
    alone, and the decoding request gets no token in it; vLLM's mixes the two."""
    observer = Observer()
    config = SimConfig(num_blocks=1000, mixed_prefill=mixed)
    requests = [req("r0", 0.0, 32, 20), req("r1", 0.045, 64, 3)]
    result, _ = run_probed(requests, config, [("observer", observer)], stretch=False)
    steps = [(s.prefill, s.decode) for s in observer.steps]
    joined = steps.index(next(s for s in steps if s[0] == 64))
    assert steps[joined] == ((64, 0) if mixed is False else (64, 1))
    assert all(p == 0 or d == 0 for p, d in steps) is (not mixed)
    r0 = by_id(result)["r0"]
    assert r0.finish_s == pytest.approx(0.01 * (20 + (0 if mixed else 1)))


def test_finished_requests_drop_their_hashes_when_no_policy_could_keep_them() -> None:
    requests = [req("a", 0.0, 256, 2, hash_ids=(1, 2, 3, 4))]
    bare = engine(requests, HASHED, [])
    bare.run()
    assert [r.block_hashes for r in bare.pending] == [()]
    kept = run_checking_hashes(requests, HASHED).eng
    assert kept is not None
    assert [len(r.block_hashes) for r in kept.pending] == [256 // HASHED.block_size]


class StateAtOrder(Policy):
    """Records the free KV blocks that plan_batch and order_waiting read in each step."""

    def __init__(self) -> None:
        super().__init__()
        self.planned: dict[int, int] = {}
        self.ordered: dict[int, int] = {}

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> None:
        self.planned[engine.step_index] = engine.kv_blocks_free

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> None:
        self.ordered[engine.step_index] = engine.kv_blocks_free


def test_order_waiting_reads_the_engine_before_the_step() -> None:
    """As on vLLM and SGLang: asked before the running requests take their blocks for the
    step (chunked prefills and decodes crossing a block here), so it reads what the step's
    plan_batch read."""
    requests = [req(f"r{i}", 0.001 * i, 100 + 7 * i, 40) for i in range(12)]
    config = SimConfig(num_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=64)
    policy = StateAtOrder()
    engine(requests, config, [("state", policy)], stretch=False).run()
    assert len(policy.ordered) > 10
    assert {i: policy.planned[i] for i in policy.ordered} == policy.ordered


class ByPromptKey(Policy):
    @hookimpl
    def waiting_key(self, request: RequestView, engine: EngineView) -> tuple[int]:
        return (request.num_prompt_tokens,)


def test_a_request_preempted_under_a_policy_s_order_goes_first() -> None:
    """The keyed queue under an order_waiting order (which lasts the step): a request the
    step preempts goes before that order, one that joins after it, until the step ends."""
    from schedkit.facade import PolicyFacade
    from schedkit.sim.waiting import KeyedWaiting

    facade = PolicyFacade([("key", ByPromptKey())])
    a, b, c, victim, late = (
        SimRequest.from_trace(i, req(n, 0.0, p, 1), 16, 16)
        for i, (n, p) in enumerate([("a", 30), ("b", 20), ("c", 10), ("v", 50), ("l", 5)])
    )
    waiting: KeyedWaiting[SimRequest] = KeyedWaiting(
        facade, EngineState(kv_blocks_total=64, block_size=16)
    )
    for r in (a, b, c):
        waiting.append(r)
    assert list(waiting) == [c, b, a]  # by key
    waiting.reorder([a, c, b])
    waiting.appendleft(victim)
    waiting.append(late)
    assert list(waiting) == [victim, a, c, b, late] and len(waiting) == 5
    assert [waiting.popleft(), waiting[0]] == [victim, a]
    waiting.end_step()
    assert list(waiting) == [late, c, b, a]  # the keys' order again
