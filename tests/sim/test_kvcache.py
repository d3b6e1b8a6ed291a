"""KVCache on its own: allocation, block tables, own spans and shared spans, LRU and
policy eviction, and the conservation check the engine runs after every step."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _fixtures import EvictNewestFirst, Faulty
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit import BlockView, EngineState, EngineView, Policy, PolicyFacade, hookimpl
from schedkit.sim.kv.blocks import BlockTable, OwnSpan, blocks_for, own_block_hash, own_key_of
from schedkit.sim.kv.cache import KVCache

BS = 16
PER = 2  # blocks per trace hash id (group) in these tests


def cache(num_blocks: int = 10, *policies: tuple[str, Policy], window: int = 4096) -> KVCache:
    return KVCache(
        num_blocks,
        BS,
        prefix_caching=True,
        facade=PolicyFacade(list(policies)),
        engine=EngineState(num_blocks, BS),
        eviction_window=window,
        group_blocks=PER,
    )


def table(key: int, groups: tuple[int, ...] = (), num_shared: int | None = None) -> BlockTable:
    return BlockTable(key, groups, len(groups) * PER if num_shared is None else num_shared)


def admit(kv: KVCache, t: BlockTable, blocks: int, computed_blocks: int) -> tuple[int, int]:
    """Admit a request the way the engine does: hit, take the rest, publish what it
    computed. Returns (shared, own) blocks hit."""
    hit, own, reclaim = kv.lookup(t, blocks * BS + 1)
    assert kv.can_allocate(reclaim + own, blocks - hit - own)
    kv.touch(t, hit, own)
    kv.take(blocks - hit - own)
    kv.add_blocks(t, blocks - hit - own)
    kv.publish(t, hit + own, computed_blocks)
    return hit, own


def owns(kv: KVCache) -> dict[int, int]:
    return {k: e.count for k, e in kv.cached_free.items() if isinstance(e, OwnSpan)}


def shared_free(kv: KVCache) -> list[int]:
    """Hashes of the unreferenced shared blocks, least recently used first."""
    return [
        s.group * PER + j
        for e in kv.cached_free.values()
        if isinstance(e, list)
        for s in e
        for j in reversed(range(s.lo, s.hi))
    ]


def test_blocks_for_is_a_ceiling_division() -> None:
    assert [blocks_for(n, BS) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_own_block_hashes_name_their_request() -> None:
    assert own_key_of(own_block_hash(-3, 0)) == -3 and own_key_of(own_block_hash(-3, 7)) == -3


# -- allocation -------------------------------------------------------------------------


def test_a_new_cache_is_all_free() -> None:
    kv = cache(10)
    assert (kv.num_free, kv.num_used, kv.free_uncached, kv.cached_blocks) == (10, 0, 10, 0)
    kv.check([])


def test_take_and_release_private_blocks() -> None:
    kv, t = cache(10), table(-1)
    assert kv.can_allocate(0, 10) and not kv.can_allocate(0, 11)
    kv.take(7)
    kv.add_blocks(t, 7)
    assert (kv.num_free, kv.num_used) == (3, 7)
    kv.check([t])
    kv.release(t, clock=1.0)
    assert (kv.num_free, kv.free_uncached, kv.cached_free, t.nblocks) == (10, 10, {}, 0)
    kv.check([])


def test_check_catches_a_leak_and_a_miscount() -> None:
    kv, t = cache(10), table(-1)
    kv.take(3)
    kv.add_blocks(t, 2)
    with pytest.raises(AssertionError):
        kv.check([t])  # one block held by nobody
    kv.add_blocks(t, 1)
    kv.check([t])
    kv.cached_blocks += 1  # a cached block no entry accounts for
    with pytest.raises(AssertionError):
        kv.check([t])


# -- a request's own blocks: one span -----------------------------------------------------


def test_own_blocks_are_cached_as_one_span_and_hit_again() -> None:
    kv, t = cache(10), table(-1)
    admit(kv, t, 5, 3)  # 3 full computed blocks, 2 private (partial, never computed)
    kv.release(t, clock=1.0)
    assert owns(kv) == {-1: 3}
    assert (kv.num_free, kv.free_uncached, kv.cached_blocks) == (10, 7, 3)
    kv.check([])
    assert kv.lookup(t, 5 * BS) == (0, 3, 0) and kv.lookup(table(-2), 5 * BS) == (0, 0, 0)
    assert kv.lookup(t, 2 * BS + 1) == (0, 2, 0)  # the last token is always recomputed
    assert admit(kv, t, 5, 3) == (0, 3)
    assert owns(kv) == {} and kv.num_free == 5
    kv.check([t])


def test_an_own_span_is_evicted_from_its_tail_and_keeps_its_place() -> None:
    kv, a, b = cache(10), table(-1), table(-2)
    admit(kv, a, 4, 4)
    admit(kv, b, 3, 3)
    kv.release(a, clock=1.0)  # older
    kv.release(b, clock=2.0)
    assert kv.free_uncached == 3
    kv.take(5)  # 3 uncached, then 2 blocks from the least recently freed span's tail
    assert owns(kv) == {-1: 2, -2: 3} and list(kv.cached_free) == [-1, -2]
    assert kv.evictions == 2
    kv.take(3)  # the rest of span -1, then one block of span -2
    assert owns(kv) == {-2: 2} and kv.evictions == 5


# -- shared blocks ------------------------------------------------------------------------


def test_shared_blocks_are_refcounted_and_cached_when_unreferenced() -> None:
    kv = cache(10)
    a, b, c = table(-1, (50,)), table(-2, (50,)), table(-3, (50,), num_shared=1)
    assert admit(kv, a, 3, 2) == (0, 0)  # blocks 100 and 101 published, one private
    assert kv.is_cached(100) and kv.is_cached(101) and kv.referenced_blocks() == 2
    kv.check([a])
    assert kv.lookup(b, 3 * BS) == (2, 0, 0)
    assert admit(kv, b, 3, 2) == (2, 0)  # found both: refcounts rise, one block taken
    kv.check([a, b])
    assert kv.num_free == 6
    kv.release(a, clock=2.0)
    assert kv.cached_free == {} and kv.referenced_blocks() == 2
    kv.release(b, clock=3.0)
    assert kv.referenced_blocks() == 0 and shared_free(kv) == [101, 100]  # tail first
    [entry] = kv.cached_free.values()
    assert isinstance(entry, list)  # shared spans, not a request's own span
    [span] = entry
    assert (span.last_access, span.num_hits, kv.num_free) == (3.0, 1, 10)
    kv.check([])
    # A shorter prompt finds only block 100, reclaimed from the free pool; 101 stays free.
    assert kv.lookup(c, 2 * BS) == (1, 0, 1)
    assert admit(kv, c, 2, 1) == (1, 0)
    assert shared_free(kv) == [101] and kv.num_free == 8
    kv.check([c])


def test_a_second_copy_of_a_cached_block_stays_private() -> None:
    kv, a, b = cache(6), table(-1, (7,)), table(-2, (7,))
    admit(kv, a, 2, 0)
    admit(kv, b, 2, 0)  # both compute the prefix, neither has published it yet
    kv.publish(a, 0, 2)
    kv.publish(b, 0, 2)
    assert (a.num_referenced, b.num_referenced) == (2, 0)
    kv.check([a, b])
    kv.release(b, clock=1.0)
    assert kv.free_uncached == 4 and shared_free(kv) == []
    kv.release(a, clock=2.0)
    assert shared_free(kv) == [15, 14]
    kv.check([])


def test_lru_evicts_the_least_recently_freed_first_and_forgets_the_hash() -> None:
    kv = cache(7)
    tables = [table(-1, (1,)), table(-2, (2,)), table(-3, (3,))]
    for t in tables:
        admit(kv, t, 2, 2)
    kv.release(tables[1], clock=1.0)
    kv.release(tables[0], clock=2.0)
    kv.release(tables[2], clock=3.0)
    assert shared_free(kv) == [5, 4, 3, 2, 7, 6]
    kv.take(2)  # 1 uncached, then block 5
    assert shared_free(kv) == [4, 3, 2, 7, 6] and not kv.is_cached(5) and kv.evictions == 1
    kv.take(2)
    assert shared_free(kv) == [2, 7, 6] and 2 not in kv.groups


# -- eviction by policy ---------------------------------------------------------------------


def test_an_eviction_policy_chooses_the_blocks_and_sees_every_candidate() -> None:
    newest_first = EvictNewestFirst()
    kv = cache(6, ("mru", newest_first))
    a, b, c = table(-1, (1,), 1), table(-2, (2,), 1), table(-3)
    admit(kv, a, 1, 1)
    admit(kv, b, 1, 1)
    admit(kv, c, 4, 3)
    kv.release(a, clock=1.0)
    kv.release(b, clock=2.0)
    kv.release(c, clock=3.0)
    kv.take(2)  # 1 uncached + 1 evicted
    [(candidates, needed)] = newest_first.calls
    assert needed == 1 and len(candidates) == 5  # two shared blocks, three own ones
    # A request's blocks are freed tail first, so the newest is its first own block;
    # evicting it drops the span (nothing can reach the rest), freeing 2 blocks more.
    assert candidates == [2, 4, *(own_block_hash(-3, j) for j in (2, 1, 0))]
    assert owns(kv) == {} and shared_free(kv) == [2, 4]
    assert kv.free_uncached == 2


def test_an_eviction_policy_sees_only_the_oldest_blocks_of_the_window() -> None:
    newest_first = EvictNewestFirst()
    kv = cache(10, ("mru", newest_first), window=5)
    tables = [table(-1, (1,), 1), table(-2, (2,), 1), table(-3), table(-4, (3,), 1)]
    for t, n in zip(tables, (1, 1, 4, 1), strict=True):
        admit(kv, t, n, n)
    kv.take(3)
    for clock, t in enumerate(tables):
        kv.release(t, clock=float(clock))
    kv.take(1)
    [(candidates, needed)] = newest_first.calls
    # Blocks 2 and 4, then the own span's last three, last block first (LRU order): 5 of 8.
    tail = [own_block_hash(-3, j) for j in (3, 2, 1)]
    assert needed == 1 and candidates == [2, 4, *tail]
    # The newest candidate, the span's second block, went with the blocks after it.
    assert owns(kv) == {-3: 1} and shared_free(kv) == [2, 4, 6]
    kv.take(4)  # 2 uncached + 2 evicted: the window grows to 4 x 2 = 8, every evictable block
    assert len(newest_first.calls[1][0]) == 4


def test_evicting_a_middle_block_splits_its_span_in_place() -> None:
    class EvictDepth(Policy):
        def __init__(self, depth: int) -> None:
            super().__init__()
            self.depth = depth
            self.offered: list[list[int]] = []

        @hookimpl
        def select_evictions(
            self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
        ) -> list[BlockView]:
            self.offered.append([b.block_hash for b in candidates])
            return [b for b in candidates if b.depth == self.depth][:num_blocks]

    policy = EvictDepth(1)
    kv = KVCache(
        8, BS, prefix_caching=True, facade=PolicyFacade([("depth", policy)]),
        engine=EngineState(8, BS), group_blocks=4,
    )  # fmt: skip
    a, b = BlockTable(-1, (5,), 4), BlockTable(-2, (6,), 4)
    for t in (a, b):
        kv.take(4)
        kv.add_blocks(t, 4)
        kv.publish(t, 0, 4)
    kv.release(a, clock=1.0)
    kv.release(b, clock=2.0)
    holder = BlockTable(-3, (), 0)  # whoever takes the evicted blocks
    kv.take(1)  # evicts block 21 (depth 1 of group 5): 23, 22 | 20 keep their places
    kv.add_blocks(holder, 1)
    assert policy.offered == [[23, 22, 21, 20, 27, 26, 25, 24]]
    kv.check([holder])
    policy.depth = -1  # no choice: LRU
    kv.take(3)  # 23, 22, then 20
    kv.add_blocks(holder, 3)
    assert policy.offered[1] == [23, 22, 20, 27, 26, 25, 24]
    assert 5 not in kv.groups and kv.is_cached(27) and kv.cached_blocks == 4
    kv.check([holder])


def test_a_policy_that_has_no_opinion_or_raises_leaves_lru() -> None:
    faulty = Faulty(lambda: True)
    facade = PolicyFacade([("faulty", faulty)])
    kv = KVCache(
        2, BS, prefix_caching=True, facade=facade, engine=EngineState(2, BS), group_blocks=PER
    )
    a, b = table(-1, (1,), 1), table(-2, (2,), 1)
    admit(kv, a, 1, 1)
    admit(kv, b, 1, 1)
    kv.release(a, clock=1.0)
    kv.release(b, clock=2.0)
    kv.take(1)
    assert shared_free(kv) == [4] and not kv.is_cached(2)
    assert faulty.raised == {"select_evictions": 1, "eviction_key": 2}  # a key per candidate
    assert facade.error_count == 3


# -- conservation under random use ----------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(data=st.data(), evict_newest=st.booleans())
def test_blocks_are_conserved_under_random_admit_and_release(
    data: st.DataObject, evict_newest: bool
) -> None:
    """Requests come and go the way the engine drives the cache: hit a cached prefix (whole
    groups or part of one), take fresh blocks, publish in chunks (copies of blocks another
    request published meanwhile stay private), release tail first."""
    policies = [("mru", EvictNewestFirst())] if evict_newest else []
    kv = cache(16, *policies, window=data.draw(st.sampled_from([0, 3]), label="window"))
    live: dict[int, tuple[BlockTable, int]] = {}  # key -> table, blocks computed
    for key in range(-1, -41, -1):
        clock = float(-key)
        action = data.draw(st.sampled_from(["admit", "release", "compute"]), label="action")
        if action == "release" and live:
            gone = data.draw(st.sampled_from(sorted(live)), label="which")
            kv.release(live.pop(gone)[0], clock)
        elif action == "compute" and live:
            k = data.draw(st.sampled_from(sorted(live)), label="which")
            t, done = live[k]
            end = data.draw(st.integers(done, t.nblocks), label="computed")
            kv.publish(t, done, end)
            live[k] = (t, end)
        elif action == "admit":
            groups = tuple(data.draw(st.lists(st.integers(1, 4), max_size=3, unique=True)))
            num_shared = data.draw(st.integers(0, len(groups) * PER), label="shared blocks")
            t = table(key, groups, num_shared)
            blocks = num_shared + data.draw(st.integers(0, 3), label="own blocks")
            tokens = blocks * BS - data.draw(st.integers(0, BS - 1), label="short")
            if tokens <= 0:
                continue
            hit, own, reclaim = kv.lookup(t, tokens)
            need = blocks_for(tokens, BS) - hit - own
            if not kv.can_allocate(reclaim + own, need):
                continue
            kv.touch(t, hit, own)
            kv.take(need)
            kv.add_blocks(t, need)
            end = data.draw(st.integers(hit + own, t.nblocks), label="computed")
            kv.publish(t, hit + own, end)
            live[key] = (t, end)
        tables = [t for t, _ in live.values()]
        kv.check(tables)
        assert kv.num_used == sum(t.private_blocks for t in tables) + kv.referenced_blocks()
    for t, _ in live.values():
        kv.release(t, 100.0)
    assert kv.num_free == 16 and kv.referenced_blocks() == 0
    kv.check([])
