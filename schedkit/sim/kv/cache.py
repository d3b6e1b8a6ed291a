"""Paged KV cache with prefix caching, following vLLM V1's block pool.

Blocks are cached by hash once full and computed. Free blocks are either never cached
(used first) or cached-but-unreferenced, kept least recently used first and evicted from
the front, as vLLM's free block queue does. A request's blocks are freed tail first, so
its last blocks are evicted before its prefix.

Cached data is kept in spans (``schedkit.sim.kv.blocks``), so cost follows requests and
prefixes rather than blocks:
- shared blocks (a trace's prefix hashes, e.g. Mooncake's), per hash id group: one LRU
  entry per release lists the spans it freed, last block first;
- a request's own blocks (everything no other request can share), one ``OwnSpan`` per
  request: its first ``count`` own blocks, which only that request can hit again (after a
  preemption). Evicting from it drops its last blocks first, as vLLM's tail-first order
  does.

An eviction policy is offered only the oldest evictable blocks, the *eviction window*
(``SimConfig.eviction_window``), and views are built for those alone: building one per
evictable block on every call made policy eviction many times slower than LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import pairwise

from schedkit.facade import PolicyFacade
from schedkit.sim.config import DEFAULT_EVICTION_WINDOW, EVICTION_WINDOW_PER_BLOCK
from schedkit.sim.kv.blocks import (
    BlockTable,
    LruEntry,
    OwnSpan,
    Span,
    add_ref,
    merge_spans,
    own_block_hash,
    own_key_of,
)
from schedkit.sim.kv.evict_keys import keyed_evictions
from schedkit.views import BlockSnapshot, BlockView, EngineView


class KVCache:
    """Block accounting for the simulated engine."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        prefix_caching: bool,
        facade: PolicyFacade,
        engine: EngineView,
        eviction_window: int = DEFAULT_EVICTION_WINDOW,
        group_blocks: int = 0,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.group_blocks = group_blocks  # engine blocks per trace hash id
        self.free_uncached = num_blocks
        # Evictable cached data, least recently used first: an own key (< 0) -> OwnSpan,
        # or an entry number (> 0) -> the shared spans one release freed, in LRU order.
        self.cached_free: OrderedDict[int, LruEntry] = OrderedDict()
        self.cached_blocks = 0  # blocks held by cached_free
        self.groups: dict[int, list[Span]] = {}  # group -> its cached spans, by lo
        self.evictions = 0
        self.eviction_window = eviction_window  # 0: offer every evictable block
        self._entries = 0
        self._facade = facade
        self._engine = engine
        # eviction_key alone: the cache keeps its evictable spans in key order
        self.keyed = None
        if facade.has_eviction_key and not facade.has_evictions_list:
            self.keyed = keyed_evictions(self)
        self._lru_seq = 0  # insertions into cached_free: the LRU rank of what is freed

    @property
    def num_free(self) -> int:
        return self.free_uncached + self.cached_blocks

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.free_uncached - self.cached_blocks

    # -- lookups ----------------------------------------------------------------------

    def lookup(self, table: BlockTable, num_tokens: int) -> tuple[int, int, int]:
        """Leading blocks found in the prefix cache: (shared, own, how many of the shared
        ones are unreferenced now, so reclaimed from the free pool by a hit).

        At most ``num_tokens - 1`` tokens are hits, as in vLLM: the last is recomputed.
        """
        if not self.prefix_caching:
            return 0, 0, 0
        limit = (num_tokens - 1) // self.block_size
        num_shared = table.num_shared
        n = min(limit, num_shared)
        hit = reclaim = 0
        if n:
            per, groups = self.group_blocks, self.groups
            for g in table.groups:
                need = n - hit
                if need > per:
                    need = per
                spans = groups.get(g)
                if spans is None:
                    return hit, 0, reclaim
                covered = 0
                for s in spans:
                    if s.lo != covered:
                        break
                    if not s.refs:
                        reclaim += (s.hi if s.hi < need else need) - covered
                    covered = s.hi
                    if covered >= need:
                        break
                if covered < need:
                    return hit + covered, 0, reclaim
                hit += need
                if hit >= n:
                    break
        if limit <= num_shared:
            return hit, 0, reclaim
        own = self.cached_free.get(table.key)
        if not isinstance(own, OwnSpan):
            return hit, 0, reclaim
        return hit, min(own.count, limit - num_shared), reclaim

    def can_allocate(self, reclaimed: int, num_new: int) -> bool:
        """Whether ``num_new`` fresh blocks fit after reclaiming ``reclaimed`` cached ones
        (a hit's unreferenced blocks, own ones included)."""
        return num_new <= self.free_uncached + self.cached_blocks - reclaimed

    def is_cached(self, block_hash: int) -> bool:
        """Whether the shared block ``block_hash`` (>= 0) is cached (tests)."""
        spans = self.groups.get(block_hash // self.group_blocks, ())
        j = block_hash % self.group_blocks
        return any(s.lo <= j < s.hi for s in spans)

    # -- a request's blocks -------------------------------------------------------------

    def touch(self, table: BlockTable, hit: int, own_hit: int) -> None:
        """Reference the cached blocks a request found (a prefix-cache hit): its first
        ``hit`` shared blocks and ``own_hit`` own ones."""
        per, groups, refs = self.group_blocks, self.groups, table.refs
        left = hit
        for g in table.groups:
            if left <= 0:
                break
            k = per if left > per else left
            left -= k
            spans = groups[g]
            if spans[0].lo < k < spans[-1].hi:  # else no span holds k inside it
                self._cut(spans, k)
            for s in spans:
                if s.lo >= k:
                    break
                if not s.refs:
                    self._unlist(s)
                    self.cached_blocks -= s.hi - s.lo
                    s.views = None
                s.refs += 1
                s.num_hits += 1
            merge_spans(spans)
            refs.append((g, 0, k))
        table.num_referenced += hit
        if own_hit:
            own = self.cached_free.pop(table.key)
            assert isinstance(own, OwnSpan)
            self.cached_blocks -= own.count
            table.own_cached = own_hit
        table.nblocks += hit + own_hit

    def add_blocks(self, table: BlockTable, count: int) -> None:
        """Give the request ``count`` blocks the caller took (``take``)."""
        table.nblocks += count

    def publish(self, table: BlockTable, first: int, end: int) -> None:
        """Put the request's blocks ``first..end-1``, now full and computed, into the
        prefix cache. A shared block another copy of which is already cached stays
        private (vLLM keeps such duplicates out of the cache too)."""
        num_shared = table.num_shared
        if first >= end:
            return
        if first < num_shared:
            per, groups, refs = self.group_blocks, self.groups, table.refs
            stop = min(end, num_shared)
            table_groups = table.groups
            for p in range(first // per, (stop - 1) // per + 1):
                base = p * per
                lo = first - base if first > base else 0
                hi = stop - base if stop - base < per else per
                g = table_groups[p]
                spans = groups.get(g)
                if spans is None:
                    groups[g] = [Span(g, lo, hi, 1, 0, base)]
                    add_ref(refs, g, lo, hi)
                    table.num_referenced += hi - lo
                    continue
                at, i = lo, 0
                while at < hi:  # fill the gaps in lo..hi-1 with new spans
                    while i < len(spans) and spans[i].hi <= at:
                        i += 1
                    if i < len(spans) and spans[i].lo <= at:
                        at = spans[i].hi  # cached already: a private copy
                        continue
                    gap_end = spans[i].lo if i < len(spans) and spans[i].lo < hi else hi
                    spans.insert(i, Span(g, at, gap_end, 1, 0, base))
                    add_ref(refs, g, at, gap_end)
                    table.num_referenced += gap_end - at
                    at = gap_end
                merge_spans(spans)
        if end > num_shared and max(first, num_shared) - num_shared == table.own_cached:
            table.own_cached = end - num_shared

    def release(self, table: BlockTable, clock: float) -> None:
        """Free all a request's blocks, tail first: own ones, then shared ones backwards."""
        own_cached = table.own_cached
        self.free_uncached += table.nblocks - table.num_referenced - own_cached
        cached_free, key = self.cached_free, table.key
        stale = cached_free.pop(key, None)
        if isinstance(stale, OwnSpan):  # cached before a readmission that did not hit it
            self.cached_blocks -= stale.count
            self.free_uncached += stale.count
        keyed = self.keyed
        if own_cached:
            own = cached_free[key] = OwnSpan(key, own_cached, table.num_shared, clock)
            self.cached_blocks += own_cached
            if keyed is not None:
                self._lru_seq += 1
                own.rank = (self._lru_seq, 0, 0)
                keyed.mark(own, own.rank, fresh=True)
        if table.refs:
            self._entries += 1
            entry = self._entries
            freed_list: list[Span] = []
            groups, seq, freed_blocks = self.groups, self._lru_seq + 1, 0
            for g, lo, hi in reversed(table.refs):
                spans = groups[g]
                if spans[0].lo < lo:  # (a cut outside every span's inside changes nothing)
                    self._cut(spans, lo)
                if hi < spans[-1].hi:
                    self._cut(spans, hi)
                for i in range(len(spans) - 1, -1, -1):
                    s = spans[i]
                    if s.lo >= hi:
                        continue
                    if s.hi <= lo:
                        break
                    s.refs -= 1
                    if not s.refs:
                        s.last_access = clock
                        s.entry = entry
                        s.views = None
                        s.rank = (seq, len(freed_list), 0)
                        freed_list.append(s)
                        freed_blocks += s.hi - s.lo
                merge_spans(spans)
            self.cached_blocks += freed_blocks
            if freed_list:
                cached_free[entry] = freed_list
                self._lru_seq += 1
                if keyed is not None:
                    keyed.mark_freed(freed_list)
        table.clear()

    # -- taking blocks, evicting cached ones ----------------------------------------------

    def take(self, count: int) -> None:
        """Take ``count`` blocks for new data, evicting cached ones if needed.

        The caller checked ``can_allocate`` first.
        """
        if count <= self.free_uncached:
            self.free_uncached -= count
            return
        evict = count - self.free_uncached
        self.free_uncached = 0
        self.evictions += evict
        if self.keyed is not None:
            freed = self.keyed.evict(evict)
        else:
            freed = self._evict_by_policy(evict) if self._facade.has_evictions else 0
        if freed < evict:
            self._evict_lru(evict - freed)
        elif freed > evict:
            self.free_uncached += freed - evict

    def _evict_lru(self, count: int) -> None:
        cached_free = self.cached_free
        self.cached_blocks -= count
        while count:
            key, entry = next(iter(cached_free.items()))
            if isinstance(entry, OwnSpan):
                if entry.count > count:
                    entry.count -= count  # drop its last blocks, keep its place
                    return
                del cached_free[key]
                count -= entry.count
                continue
            while entry and count:
                s = entry[0]
                size = s.hi - s.lo
                if size > count:
                    s.hi -= count  # its last blocks first
                    return
                count -= size
                del entry[0]
                self._drop(s)
            if not entry:
                del cached_free[key]

    def _evict_by_policy(self, count: int) -> int:
        """Ask the policy which blocks to evict; returns how many blocks it freed.

        It sees the least recently used evictable blocks, at most
        ``max(eviction_window, EVICTION_WINDOW_PER_BLOCK * count)`` of them.
        """
        window = self.eviction_window
        limit = max(window, EVICTION_WINDOW_PER_BLOCK * count) if window else self.cached_blocks
        candidates: list[BlockView] = []
        for key, entry in self.cached_free.items():
            left = limit - len(candidates)
            if left <= 0:
                break
            if isinstance(entry, OwnSpan):
                # Its blocks were freed tail first, so its last block is the least
                # recently used (vLLM's free queue order): offered last block first. One
                # the window cuts offers its last blocks; evicting one drops only blocks
                # inside the window.
                for j in reversed(range(max(0, entry.count - left), entry.count)):
                    own = BlockSnapshot(
                        own_block_hash(key, j),
                        entry.first_depth + j,
                        entry.last_access,
                        entry.num_hits,
                    )
                    candidates.append(own)
                continue
            for s in entry:
                views = s.views if s.views is not None else self._views(s)
                vb = s.vbase
                candidates.extend(reversed(views[s.lo - vb : s.hi - vb]))
                if len(candidates) >= limit:
                    break
        del candidates[limit:]
        chosen = self._facade.select_evictions(candidates, count, self._engine)
        if chosen is None:
            return 0
        freed = 0
        for block in chosen[:count]:
            h = block.block_hash
            if h >= 0:
                self._evict_block(h // self.group_blocks, h % self.group_blocks)
                freed += 1
                continue
            span = self.cached_free.get(own_key_of(h))
            if not isinstance(span, OwnSpan):
                continue  # dropped whole by an earlier block of the same span
            keep = block.depth - span.first_depth  # a prefix: drop from there on
            if keep < span.count:
                freed += span.count - keep
                span.count = keep
                if keep == 0:
                    del self.cached_free[span.key]
        self.cached_blocks -= freed
        return freed

    def _views(self, s: Span) -> list[BlockSnapshot]:
        """Views of a free span's blocks (read-only), built once while it stays free."""
        base, depth0, last, hits = s.group * self.group_blocks, s.depth0, s.last_access, s.num_hits
        views = [BlockSnapshot(base + j, depth0 + j, last, hits) for j in range(s.lo, s.hi)]
        s.views, s.vbase = views, s.lo
        return views

    def _evict_block(self, g: int, j: int) -> None:
        """Evict shared block ``j`` of group ``g`` (unreferenced), wherever it sits."""
        spans = self.groups[g]
        s = next(s for s in spans if s.lo <= j < s.hi)
        if s.hi - s.lo == 1:
            self._unlist(s)
            self._drop(s)
        elif j == s.hi - 1:
            s.hi = j
        elif j == s.lo:
            s.lo = j + 1
        else:  # split: the upper piece comes first in LRU order, at the same place
            top = s.upper(j + 1)
            s.hi = j
            spans.insert(spans.index(s) + 1, top)
            entry = self.cached_free[s.entry]
            assert isinstance(entry, list)
            entry.insert(entry.index(s), top)

    # -- span upkeep ----------------------------------------------------------------------

    def _cut(self, spans: list[Span], j: int) -> None:
        """Make ``j`` a boundary between spans of a group."""
        for i, s in enumerate(spans):
            if s.lo >= j:
                return
            if j < s.hi:
                top = s.upper(j)
                spans.insert(i + 1, top)
                if not s.refs:  # the upper piece is freed (and evicted) first
                    entry = self.cached_free[s.entry]
                    assert isinstance(entry, list)
                    entry.insert(entry.index(s), top)
                    if self.keyed is not None:  # both tails may rank anew
                        self.keyed.split(s, top)
                return

    def _unlist(self, s: Span) -> None:
        """Take a free span out of its LRU entry."""
        entry = self.cached_free[s.entry]
        assert isinstance(entry, list)
        entry.remove(s)
        if not entry:
            del self.cached_free[s.entry]

    def _drop(self, s: Span) -> None:
        """Forget an evicted span (already out of its LRU entry)."""
        s.serial = 0  # out of the key order too
        spans = self.groups[s.group]
        spans.remove(s)
        if not spans:
            del self.groups[s.group]

    # -- invariants (tests) ---------------------------------------------------------------

    def referenced_blocks(self) -> int:
        """Shared blocks some request references."""
        return sum(s.hi - s.lo for spans in self.groups.values() for s in spans if s.refs)

    def check(self, tables: list[BlockTable]) -> None:
        """Assert block conservation and reference counts given live requests' tables."""
        check_cache(self, tables)


def check_cache(kv: KVCache, tables: list[BlockTable]) -> None:
    """Assert a KV cache's block conservation and reference counts given the live
    requests' tables (tests)."""
    held = sum(t.private_blocks for t in tables)
    total = kv.free_uncached + kv.cached_blocks + kv.referenced_blocks() + held
    assert total == kv.num_blocks, (total, kv.num_blocks)
    counted = 0
    for key, entry in kv.cached_free.items():
        if isinstance(entry, OwnSpan):
            assert key == entry.key and entry.count > 0
            counted += entry.count
            continue
        assert entry, key
        for s in entry:
            assert s.refs == 0 and s.entry == key and s in kv.groups[s.group]
            counted += s.hi - s.lo
    assert counted == kv.cached_blocks, (counted, kv.cached_blocks)
    refs: dict[tuple[int, int], int] = {}
    for t in tables:
        assert t.num_referenced == sum(hi - lo for _, lo, hi in t.refs)
        for g, lo, hi in t.refs:
            for j in range(lo, hi):
                refs[g, j] = refs.get((g, j), 0) + 1
    seen: dict[tuple[int, int], int] = {}
    for g, spans in kv.groups.items():
        assert spans and all(a.hi <= b.lo for a, b in pairwise(spans))
        for s in spans:
            assert s.group == g and s.lo < s.hi
            if s.refs:
                for j in range(s.lo, s.hi):
                    seen[g, j] = s.refs
    assert refs == seen, "block refcounts diverge from the requests' block tables"
