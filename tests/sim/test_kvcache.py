"""KVCache on its own: allocation, prefix-cache runs and shared blocks, LRU and policy
eviction, and the conservation check the engine runs after every step."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _fixtures import EvictNewestFirst, Faulty
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit import BlockView, EngineState, EngineView, Policy, PolicyFacade, hookimpl
from schedkit.sim.kvcache import KVCache, Run, own_block_hash

BS = 16


def cache(num_blocks: int = 10, *policies: tuple[str, Policy]) -> KVCache:
    return KVCache(
        num_blocks,
        BS,
        prefix_caching=True,
        facade=PolicyFacade(list(policies)),
        engine=EngineState(num_blocks, BS),
    )


def runs(kv: KVCache) -> dict[int, int]:
    return {k: e.count for k, e in kv.cached_free.items() if isinstance(e, Run)}


def shared_free(kv: KVCache) -> list[int]:
    return [k for k, e in kv.cached_free.items() if not isinstance(e, Run)]


# -- allocation -------------------------------------------------------------------------


def test_a_new_cache_is_all_free() -> None:
    kv = cache(10)
    assert (kv.num_free, kv.num_used, kv.free_uncached, kv.cached_blocks) == (10, 0, 10, 0)
    kv.check(0)


def test_take_and_free_private_blocks() -> None:
    kv = cache(10)
    assert kv.can_allocate((), 0, 10) and not kv.can_allocate((), 0, 11)
    kv.take(7)
    assert (kv.num_free, kv.num_used) == (3, 7)
    kv.check(7)
    assert kv.can_allocate((), 0, 3) and not kv.can_allocate((), 0, 4)
    kv.free([], 7, run_key=-1, run=0, run_depth=0, clock=1.0)
    assert (kv.num_free, kv.free_uncached, kv.cached_free) == (10, 10, {})
    kv.check(0)


def test_check_catches_a_leak_and_a_miscount() -> None:
    kv = cache(10)
    kv.take(3)
    with pytest.raises(AssertionError):
        kv.check(2)  # one block held by nobody
    kv.check(3)
    kv.cached_blocks += 1  # a cached block no entry accounts for
    with pytest.raises(AssertionError):
        kv.check(2)


# -- a request's own blocks: one run ------------------------------------------------------


def test_own_blocks_are_cached_as_one_run_and_hit_again() -> None:
    kv = cache(10)
    kv.take(5)
    # 3 full computed blocks cached, 2 private (a partial block and one never computed).
    kv.free([], 2, run_key=-1, run=3, run_depth=0, clock=1.0)
    assert runs(kv) == {-1: 3}
    assert (kv.num_free, kv.free_uncached, kv.cached_blocks) == (10, 7, 3)
    assert kv.run_hit(-1) == 3 and kv.run_hit(-2) == 0
    kv.check(0)
    # The request comes back: its run is referenced again, then 2 more blocks taken.
    assert kv.can_allocate((), 3, 7) and not kv.can_allocate((), 3, 8)
    kv.touch((), -1, 3, clock=2.0)
    kv.take(2)
    assert runs(kv) == {} and kv.num_free == 5
    kv.check(5)


def test_a_run_is_evicted_from_its_tail_and_keeps_its_place() -> None:
    kv = cache(10)
    kv.take(7)
    kv.free([], 0, run_key=-1, run=4, run_depth=2, clock=1.0)  # older
    kv.free([], 0, run_key=-2, run=3, run_depth=0, clock=2.0)
    assert kv.free_uncached == 3
    kv.take(5)  # 3 uncached, then 2 blocks from the least recently freed run's tail
    assert runs(kv) == {-1: 2, -2: 3} and list(kv.cached_free) == [-1, -2]
    assert kv.evictions == 2
    kv.check(5)
    kv.take(3)  # the rest of run -1, then one block of run -2
    assert runs(kv) == {-2: 2} and kv.evictions == 5
    assert kv.run_hit(-1) == 0 and kv.run_hit(-2) == 2
    kv.check(8)


# -- shared blocks ------------------------------------------------------------------------


def test_shared_blocks_are_refcounted_and_cached_when_unreferenced() -> None:
    kv = cache(10)
    kv.take(3)  # request A: blocks 0 and 1 carry prefix hashes 100 and 101, block 2 private
    assert kv.cache_block(100, 0, clock=0.5) and kv.cache_block(101, 1, clock=0.5)
    assert not kv.cache_block(100, 0, clock=0.6)  # a second copy stays private
    assert kv.in_use == {100: 1, 101: 1}
    kv.check(1)
    # Request B finds both blocks: refcounts rise, nothing is taken for them.
    assert kv.can_allocate((100, 101), 0, 7) and not kv.can_allocate((100, 101), 0, 8)
    kv.touch((100, 101), -2, 0, clock=1.0)
    assert kv.in_use == {100: 2, 101: 2} and kv.meta[100].num_hits == 1
    kv.take(1)
    kv.check(2)
    kv.free([100, 101], 1, run_key=-1, run=0, run_depth=2, clock=2.0)  # A finishes
    assert kv.in_use == {100: 1, 101: 1} and kv.cached_free == {}
    kv.check(1)
    kv.free([100, 101], 1, run_key=-2, run=0, run_depth=2, clock=3.0)  # B finishes
    assert kv.in_use == {} and shared_free(kv) == [101, 100]  # freed tail first
    assert kv.meta[100].last_access == 3.0 and kv.num_free == 10
    kv.check(0)
    # A cached, unreferenced block found again: reclaimed from the free pool.
    assert kv.can_allocate((100,), 0, 9) and not kv.can_allocate((100,), 0, 10)
    kv.touch((100,), -3, 0, clock=4.0)
    assert kv.in_use == {100: 1} and shared_free(kv) == [101] and kv.num_free == 9
    assert kv.meta[100].num_hits == 2 and kv.meta[100].last_access == 4.0
    kv.check(0)


def test_free_of_a_private_copy_of_a_shared_block() -> None:
    kv = cache(4)
    kv.take(2)
    assert kv.cache_block(7, 1, clock=0.0)
    kv.free([None, 7], 0, run_key=-1, run=0, run_depth=2, clock=1.0)  # None: a private copy
    assert kv.free_uncached == 3 and shared_free(kv) == [7]
    kv.check(0)


def test_lru_evicts_the_least_recently_freed_first_and_forgets_the_hash() -> None:
    kv = cache(4)
    kv.take(4)
    for h in (1, 2, 3):
        assert kv.cache_block(h, 0, clock=0.0)
    kv.free([2], 0, run_key=-2, run=0, run_depth=1, clock=1.0)
    kv.free([1], 0, run_key=-1, run=0, run_depth=1, clock=2.0)
    kv.free([3], 1, run_key=-3, run=0, run_depth=1, clock=3.0)
    assert shared_free(kv) == [2, 1, 3]
    kv.take(2)  # 1 uncached, then hash 2
    assert shared_free(kv) == [1, 3] and 2 not in kv.meta and kv.evictions == 1
    kv.check(2)


# -- eviction by policy ---------------------------------------------------------------------


def test_an_eviction_policy_chooses_the_blocks_and_sees_every_candidate() -> None:
    newest_first = EvictNewestFirst()
    kv = cache(6, ("mru", newest_first))
    kv.take(6)
    kv.cache_block(1, 0, clock=0.0)
    kv.cache_block(2, 0, clock=0.0)
    kv.free([1], 0, run_key=-1, run=0, run_depth=1, clock=1.0)
    kv.free([2], 0, run_key=-2, run=0, run_depth=1, clock=2.0)
    kv.free([], 1, run_key=-3, run=3, run_depth=0, clock=3.0)
    kv.take(2)  # 1 uncached + 1 evicted
    [(candidates, needed)] = newest_first.calls
    assert needed == 1 and len(candidates) == 5  # two shared blocks, three of the run
    # A request's blocks are freed tail first, so the newest is the run's first block;
    # evicting it drops the run (nothing can reach the rest), freeing 2 blocks more.
    assert candidates == [1, 2, *(own_block_hash(-3, j) for j in (2, 1, 0))]
    assert runs(kv) == {} and shared_free(kv) == [1, 2]
    assert kv.free_uncached == 2
    kv.check(2)


def test_an_eviction_policy_sees_only_the_oldest_blocks_of_the_window() -> None:
    newest_first = EvictNewestFirst()
    kv = KVCache(
        10,
        BS,
        prefix_caching=True,
        facade=PolicyFacade([("mru", newest_first)]),
        engine=EngineState(10, BS),
        eviction_window=5,
    )
    kv.take(10)
    for h in (1, 2, 3):
        kv.cache_block(h, 0, clock=0.0)
    kv.free([1], 0, run_key=-1, run=0, run_depth=1, clock=1.0)
    kv.free([2], 0, run_key=-2, run=0, run_depth=1, clock=2.0)
    kv.free([], 0, run_key=-3, run=4, run_depth=0, clock=3.0)  # cut by the window
    kv.free([3], 0, run_key=-4, run=0, run_depth=1, clock=4.0)  # outside it
    kv.take(1)
    [(candidates, needed)] = newest_first.calls
    # Blocks 1, 2, then the run's last three, last block first (LRU order): 5 of 8.
    tail = [own_block_hash(-3, j) for j in (3, 2, 1)]
    assert needed == 1 and candidates == [1, 2, *tail]
    # The newest candidate, the run's second block, went with the blocks after it.
    assert runs(kv) == {-3: 1} and shared_free(kv) == [1, 2, 3]
    kv.check(4)  # 3 blocks never freed, 1 taken
    kv.take(4)  # 2 uncached + 2 evicted: the window grows to 4 x 2 = 8, every evictable block
    assert len(newest_first.calls[1][0]) == 4
    kv.check(8)


def test_evicting_a_runs_first_block_drops_the_whole_run() -> None:
    class EvictRunHead(Policy):
        @hookimpl
        def select_evictions(
            self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
        ) -> list[BlockView]:
            own = [b for b in candidates if b.block_hash < 0]
            return [min(own, key=lambda b: b.depth)]  # the run is a prefix: all of it goes

    kv = cache(5, ("head", EvictRunHead()))
    kv.take(5)
    kv.cache_block(9, 0, clock=0.0)
    kv.free([9], 0, run_key=-1, run=4, run_depth=1, clock=1.0)  # depths 1..4 after hash 9
    kv.take(1)
    assert runs(kv) == {} and shared_free(kv) == [9]
    assert kv.free_uncached == 3  # 4 freed, 1 taken
    kv.check(1)


def test_a_policy_that_has_no_opinion_or_raises_leaves_lru() -> None:
    faulty = Faulty(lambda: True)
    facade = PolicyFacade([("faulty", faulty)])
    kv = KVCache(2, BS, prefix_caching=True, facade=facade, engine=EngineState(2, BS))
    kv.take(2)
    kv.cache_block(1, 0, clock=0.0)
    kv.cache_block(2, 0, clock=0.0)
    kv.free([1], 0, run_key=-1, run=0, run_depth=1, clock=1.0)
    kv.free([2], 0, run_key=-2, run=0, run_depth=1, clock=2.0)
    kv.take(1)
    assert shared_free(kv) == [2] and 1 not in kv.meta
    assert faulty.raised == {"select_evictions": 1, "eviction_key": 2}  # a key per candidate
    assert facade.error_count == 3
    kv.check(1)


# -- conservation under random use ----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(data=st.data(), evict_newest=st.booleans())
def test_blocks_are_conserved_under_random_admit_and_free(
    data: st.DataObject, evict_newest: bool
) -> None:
    """Requests come and go the way the engine drives the cache: hit a cached prefix,
    take fresh blocks, publish their prefix hashes, free tail first."""
    policies = [("mru", EvictNewestFirst())] if evict_newest else []
    kv = cache(12, *policies)
    live: dict[int, tuple[list[int | None], int, int]] = {}  # key -> shared, private, run
    clock = 0.0
    for key in range(-1, -31, -1):
        clock += 1.0
        if live and data.draw(st.booleans(), label="free one"):
            gone = data.draw(st.sampled_from(sorted(live)), label="which")
            shared, private, run = live.pop(gone)
            kv.free(shared, private, gone, run, len(shared), clock)
        else:
            prefix = data.draw(st.lists(st.integers(1, 5), max_size=3, unique=True))
            hit: list[int] = []
            for h in prefix:
                if h not in kv.meta:
                    break
                hit.append(h)
            rest = len(prefix) - len(hit)
            need = rest + data.draw(st.integers(0, 3), label="own blocks")
            if need == 0 or not kv.can_allocate(hit, 0, need):
                continue
            kv.touch(hit, key, 0, clock)
            kv.take(need)
            shared: list[int | None] = list(hit)
            for i, h in enumerate(prefix[len(hit) :]):
                shared.append(h if kv.cache_block(h, len(hit) + i, clock) else None)
            run = data.draw(st.integers(0, need - rest), label="own blocks cached")
            live[key] = (shared, need - rest - run, run)
        held = sum(p + r + sum(h is None for h in s) for s, p, r in live.values())
        kv.check(held)
        refs: dict[int, int] = {}
        for s, _, _ in live.values():
            for h in s:
                if h is not None:
                    refs[h] = refs.get(h, 0) + 1
        assert refs == kv.in_use
        assert kv.num_used == held + len(kv.in_use)
    for key, (shared, private, run) in live.items():
        kv.free(shared, private, key, run, len(shared), clock + 1)
    assert kv.num_free == 12 and kv.in_use == {}
    kv.check(0)
