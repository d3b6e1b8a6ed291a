"""Eviction by ``eviction_key`` in the simulator (schedkit/sim/kv/evict_keys.py): the KV cache
keeps its evictable spans in key order, and evicts exactly the blocks a list hook ranking
every evictable block by the same key would (no window), at a fraction of the cost."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from schedkit import BlockView, EngineView, Policy, PolicyFacade, hookimpl
from schedkit.errors import PolicyConfigError
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.sim.engine import SimEngine
from schedkit.sim.kv.evict_keys import ClassKeyedEvictions, SpanKeyedEvictions
from schedkit.workload import load_workload

Key = Callable[[BlockView], Any]
KEYS: dict[str, Key] = {
    "lfu": lambda b: (b.num_hits, b.last_access),
    "deepest-first": lambda b: (b.num_hits, -b.depth, b.last_access),
    "deepest-class-first": lambda b: (b.num_hits, -b.depth_class, b.last_access),
    "newest-first": lambda b: -b.last_access,
    "fewest-hits": lambda b: b.num_hits,  # ties across releases: LRU among them
    "alike": lambda b: 0,  # one bucket: LRU order
}


READS: dict[str, tuple[str, ...]] = {  # what each key reads, for eviction_key_reads
    "lfu": ("num_hits", "last_access"),
    "deepest-first": ("num_hits", "depth", "last_access"),
    "deepest-class-first": ("num_hits", "depth_class", "last_access"),
    "newest-first": ("last_access",),
    "fewest-hits": ("num_hits",),
    "alike": (),
}


def key_policy(key: Key, reads: tuple[str, ...] | None = None) -> Policy:
    class ByKey(Policy):
        eviction_key_reads = reads

        @hookimpl
        def eviction_key(self, block: BlockView, engine: EngineView) -> Any:
            return key(block)

    return ByKey()


def list_policy(key: Key) -> Policy:
    class ByList(Policy):
        @hookimpl
        def select_evictions(
            self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
        ) -> list[BlockView]:
            return sorted(candidates, key=key)[:num_blocks]  # stable: LRU among equals

    return ByList()


def run(policy: Policy, blocks: int) -> tuple[Any, SimEngine]:
    workload = load_workload("mooncake-conv").truncated(600).scaled(0.25)
    cost, _, _ = make_cost_model("Llama-3-8B", "H100-SXM", 1, None)
    config = SimConfig(
        num_blocks=blocks,
        block_size=16,
        hash_block_tokens=workload.hash_block_tokens,
        eviction_window=0,  # the list hook ranks every evictable block
    )
    engine = SimEngine(workload.requests, cost, config, PolicyFacade([("p", policy)]))
    return engine.run(), engine


@pytest.mark.parametrize("declared", [False, True], ids=["per-block", "declared-reads"])
@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("blocks", [2_000, 6_000])
def test_keyed_eviction_evicts_what_the_list_hook_over_every_block_does(
    name: str, blocks: int, declared: bool
) -> None:
    """With ``eviction_key_reads`` declared, keys that read no depth or hash are asked per
    span (``SpanKeyedEvictions``), and per span and depth class when they read
    ``depth_class`` (``ClassKeyedEvictions``): the evictions must not change."""
    keyed, engine = run(key_policy(KEYS[name], READS[name] if declared else None), blocks)
    listed, _ = run(list_policy(KEYS[name]), blocks)
    assert engine.kv.keyed is not None  # the heap path, not the facade's
    by_span = declared and "depth" not in READS[name]
    assert isinstance(engine.kv.keyed, SpanKeyedEvictions) is by_span
    by_class = by_span and "depth_class" in READS[name]
    assert isinstance(engine.kv.keyed, ClassKeyedEvictions) is by_class
    assert engine.kv.evictions > 1_000  # under pressure
    assert [r.cached_tokens for r in keyed.records] == [r.cached_tokens for r in listed.records]
    assert [r.finish_s for r in keyed.records] == [r.finish_s for r in listed.records]
    assert keyed.prefix_hit_tokens == listed.prefix_hit_tokens
    assert keyed.policy_errors == listed.policy_errors == 0
    assert engine.kv.num_free == engine.kv.num_blocks  # nothing left referenced


def test_a_faulty_key_falls_back_to_lru_for_that_block() -> None:
    lru, _ = run(Policy(), 2_000)

    class Raising(Policy):
        @hookimpl
        def eviction_key(self, block: BlockView, engine: EngineView) -> Any:
            raise RuntimeError("no key")

    faulty, engine = run(Raising(), 2_000)
    assert engine.kv.keyed is not None and faulty.policy_errors > 0
    assert [r.finish_s for r in faulty.records] == [r.finish_s for r in lru.records]


def test_span_keys_are_asked_once_per_distinct_hits_and_last_access() -> None:
    calls: list[tuple[int, float]] = []

    def counted(block: BlockView) -> Any:
        calls.append((block.num_hits, block.last_access))
        return (block.num_hits, block.last_access)

    per_span, _ = run(key_policy(counted, READS["lfu"]), 2_000)
    assert len(calls) == len(set(calls))  # the memo holds every pair of this run
    asked = len(calls)
    calls.clear()
    per_block, _ = run(key_policy(counted), 2_000)
    assert len(calls) > 3 * asked
    assert per_span.prefix_hit_tokens == per_block.prefix_hit_tokens


def test_eviction_key_reads_naming_no_block_field_is_a_config_error() -> None:
    with pytest.raises(PolicyConfigError, match=r"eviction_key_reads names hits.*num_hits"):
        PolicyFacade([("p", key_policy(KEYS["lfu"], ("hits", "last_access")))])


def test_class_keys_are_asked_once_per_distinct_hits_last_access_and_class() -> None:
    calls: list[tuple[int, float, int]] = []

    def counted(block: BlockView) -> Any:
        calls.append((block.num_hits, block.last_access, block.depth_class))
        return KEYS["deepest-class-first"](block)

    per_class, engine = run(key_policy(counted, READS["deepest-class-first"]), 2_000)
    assert isinstance(engine.kv.keyed, ClassKeyedEvictions)
    assert len(calls) == len(set(calls))
    asked = len(calls)
    calls.clear()
    per_block, _ = run(key_policy(counted), 2_000)
    assert len(calls) > 3 * asked
    assert per_class.prefix_hit_tokens == per_block.prefix_hit_tokens


def test_a_run_of_spans_waits_for_a_piece_cut_from_its_middle() -> None:
    """One release frees its spans as one run under one key; a span cut from the middle
    of the run while free ranks again as two pieces, and the rest of the run must not be
    evicted before them: the order stays LRU's, block by block."""
    from schedkit import EngineState
    from schedkit.sim.kv.blocks import BlockTable
    from schedkit.sim.kv.cache import KVCache

    kv = KVCache(
        6, 16, prefix_caching=True, facade=PolicyFacade([("p", key_policy(KEYS["alike"], ()))]),
        engine=EngineState(6, 16), eviction_window=0, group_blocks=2,
    )  # fmt: skip
    assert isinstance(kv.keyed, SpanKeyedEvictions)
    t = BlockTable(-1, (10, 11, 12), 6)
    kv.take(6)
    kv.add_blocks(t, 6)
    kv.publish(t, 0, 6)
    kv.release(t, 1.0)  # one run: groups 12, 11, 10, tail first

    def free() -> list[tuple[int, int]]:  # LRU order, block by block
        return [(s.group, j) for e in kv.cached_free.values() for s in e  # type: ignore[union-attr]
                for j in reversed(range(s.lo, s.hi))]  # fmt: skip

    kv._cut(kv.groups[11], 1)  # group 11 in two pieces, both free, ranked again
    lru = free()
    assert lru == [(12, 1), (12, 0), (11, 1), (11, 0), (10, 1), (10, 0)]
    for n in range(1, 6):
        kv.take(1)  # evicts one block
        assert free() == lru[n:], n
