"""Eviction by ``eviction_key`` in the simulated KV cache: the engine keeps the order.

Every evictable span (``schedkit.sim.blocks``) is in a heap by the key of its tail block,
the one LRU would evict first, then by its place in the LRU order. The key is asked once
when a span becomes evictable or its tail changes (a cut, an eviction), never per call:
there is no eviction window, and a step that evicts costs O(log n) per span it touches.

Within a span the blocks share their state (hits, last access) and differ only in depth
and hash. The heap ranks a span by its tail; evicting it, the engine takes tail blocks
while they still rank before the next span, asking the head block's key first (equal to
the tail's: the whole span goes) and else bisecting, which assumes that a block's key is
no greater than the key of the block before it in the prefix (deeper blocks go first):
true of keys built from hits, last access and depth with depth decreasing, as every
shipped policy's. Ties between spans keep the LRU order; within a span, tail first.

Keys are kept flat (``schedkit.answers.flat_key``: the same order, cheaper to compare).
A policy whose key reads only ``num_hits`` and ``last_access`` (``Policy.
eviction_key_reads``) keys a span as a whole (``SpanKeyedEvictions``): its key is asked
once per distinct pair of those fields, and the spans alike in them share one bucket in
LRU order under one heap item per key. The order is the same; only the cost differs.
A key that reads depth only through ``depth_class`` (``depth.bit_length()``) is keyed
likewise a class at a time (``ClassKeyedEvictions``): a span goes in the bucket of its
tail block's class, and evicting takes its blocks in that class, then ranks it again.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from schedkit.answers import flat_key
from schedkit.sim.blocks import OwnSpan, Span, own_block_hash
from schedkit.views import BlockSnapshot

if TYPE_CHECKING:
    from schedkit.sim.kvcache import KVCache

__all__ = ["ClassKeyedEvictions", "KeyedEvictions", "SpanKeyedEvictions", "keyed_evictions"]

MEMO_LIMIT = 1 << 16  # span keys remembered; forgotten all at once beyond
Item = tuple[tuple[Any, ...], tuple[int, int, int], int, Any]  # key, LRU rank, serial, span
Entry = tuple[tuple[int, int, int], int, Any, int]  # a bucket's: LRU rank, serial, span, stop


def keyed_evictions(kv: KVCache) -> KeyedEvictions:
    """The key order for ``kv``'s policy: by span when its key reads no block's hash or
    depth (by span and depth class when it reads ``depth_class``), else by block."""
    reads = kv._facade.eviction_key_reads
    if reads is not None and not reads & {"block_hash", "depth"}:
        return ClassKeyedEvictions(kv) if "depth_class" in reads else SpanKeyedEvictions(kv)
    return KeyedEvictions(kv)


class KeyedEvictions:
    """The evictable spans of one KV cache in ``eviction_key`` order."""

    span_keys = False  # keys of whole spans, by (num_hits, last_access)

    def __init__(self, kv: KVCache) -> None:
        self.kv = kv
        # Items go stale when their span's ``serial`` moves on (re-ranked, referenced
        # again, dropped) and are skipped when they reach the top.
        self.heap: list[Item] = []
        self.serial = 0
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    # -- keys ---------------------------------------------------------------------------

    def _view(self, span: Span | OwnSpan, j: int) -> BlockSnapshot:
        """The read-only view of the span's block ``j`` (``lo <= j < hi``; own:
        ``0 <= j < count``)."""
        if isinstance(span, OwnSpan):
            block_hash, depth = own_block_hash(span.key, j), span.first_depth + j
        else:
            block_hash, depth = span.group * self.kv.group_blocks + j, span.depth0 + j
        return BlockSnapshot(block_hash, depth, span.last_access, span.num_hits)

    def _key(self, span: Span | OwnSpan, j: int) -> tuple[Any, ...]:
        """The key of the span's block ``j``, remembered by the block's fields (they do
        not change while it is evictable, and the heap keeps its key meanwhile anyway):
        evicting and bisecting ask the same blocks again. Span keys: by hits and last
        access alone, shared by every block alike in them."""
        if self.span_keys:
            fields: tuple[Any, ...] = (span.num_hits, span.last_access)
        elif isinstance(span, OwnSpan):
            fields = (own_block_hash(span.key, j), span.first_depth + j, span.last_access,
                      span.num_hits)  # fmt: skip
        else:
            fields = (span.group * self.kv.group_blocks + j, span.depth0 + j, span.last_access,
                      span.num_hits)  # fmt: skip
        key = self.memo.get(fields)
        if key is None:
            if len(self.memo) >= MEMO_LIMIT:
                self.memo.clear()
            kv = self.kv
            key = flat_key(kv._facade.eviction_key(self._view(span, j), kv._engine) or ())
            self.memo[fields] = key
        return key

    @staticmethod
    def _bounds(span: Span | OwnSpan) -> tuple[int, int]:
        return (0, span.count) if isinstance(span, OwnSpan) else (span.lo, span.hi)

    # -- the heap -----------------------------------------------------------------------

    def mark(
        self, span: Span | OwnSpan, rank: tuple[int, int, int], *, fresh: bool = False
    ) -> None:
        """``span`` is evictable now (``fresh``: it was just freed), or its tail changed
        (a cut, an eviction): (re)rank it. A span known to be uniform keeps its key."""
        lo, hi = self._bounds(span)
        if hi <= lo:
            return
        key = None if fresh else span.ukey
        if key is None:
            key = self._key(span, hi - 1)
            span.ukey = None  # uniform only once its head's key is known too (evict)
        self.serial += 1
        span.serial = self.serial
        heappush(self.heap, (key, (rank[0], rank[1], -hi), self.serial, span))

    def split(self, low: Span, top: Span) -> None:
        """A free span was cut in two: both rank anew, with its key if it was uniform."""
        top.ukey = low.ukey
        self.mark(low, low.rank)
        self.mark(top, top.rank)

    def _live(self, item: Item) -> bool:
        span: Span | OwnSpan = item[3]
        if span.serial != item[2]:
            return False
        if isinstance(span, OwnSpan):
            return self.kv.cached_free.get(span.key) is span and span.count > 0
        return span.refs == 0 and span.lo < span.hi

    def _top(self) -> Item | None:
        heap = self.heap
        while heap and not self._live(heap[0]):
            heappop(heap)
        return heap[0] if heap else None

    def forget(self, span: Span | OwnSpan) -> None:
        span.serial = 0
        span.ukey = None

    # -- evicting -----------------------------------------------------------------------

    def evict(self, count: int) -> int:
        """Evict ``count`` blocks, lowest keys first; returns how many were freed (fewer
        only when nothing evictable is left)."""
        freed = 0
        while freed < count:
            if self._top() is None:
                break
            key, rank, _, span = heappop(self.heap)
            lo, hi = self._bounds(span)
            take = hi - lo
            nxt = None if span.ukey is not None or take == 1 else self._top()
            if nxt is not None:
                bar = (nxt[0], nxt[1])
                head = self._key(span, lo)
                if head == key:  # alike from head to tail: all of it goes first
                    span.ukey = key
                elif (head, rank) >= bar:  # not all of it goes before the next
                    ok, bad = 1, hi - lo  # the tail alone goes first; bisect the rest
                    while bad - ok > 1:
                        mid = (ok + bad) // 2
                        if (self._key(span, hi - mid), rank) < bar:
                            ok = mid
                        else:
                            bad = mid
                    take = ok
            take = min(take, count - freed)
            self._drop_tail(span, take)
            freed += take
            if take < hi - lo:
                self.mark(span, rank)
            else:
                self.forget(span)
        self.kv.cached_blocks -= freed
        return freed

    def _drop_tail(self, span: Span | OwnSpan, n: int) -> None:
        kv = self.kv
        if isinstance(span, OwnSpan):
            span.count -= n
            if span.count == 0:
                del kv.cached_free[span.key]
            return
        span.hi -= n
        if span.hi == span.lo:
            kv._unlist(span)
            kv._drop(span)


class SpanKeyedEvictions(KeyedEvictions):
    """Evictable spans keyed as a whole, bucketed by key: a heap of the distinct keys,
    and per key a heap of its spans by LRU rank (cheap to compare: three ints). An entry
    also holds where the span's run under that key starts (``stop``; its ``lo`` here)."""

    span_keys = True

    def __init__(self, kv: KVCache) -> None:
        super().__init__(kv)
        self.buckets: dict[tuple[Any, ...], list[Entry]] = {}
        self.keys: list[tuple[Any, ...]] = []  # heap of the buckets' keys

    def mark(
        self, span: Span | OwnSpan, rank: tuple[int, int, int], *, fresh: bool = False
    ) -> None:
        lo, hi = self._bounds(span)
        if hi <= lo:
            return
        key = None if fresh else span.ukey
        if key is None:
            key = span.ukey = self._key(span, hi - 1)
        self._push(span, rank, key, lo, hi)

    def _push(
        self, span: Span | OwnSpan, rank: tuple[int, int, int], key: tuple[Any, ...], stop: int,
        hi: int,
    ) -> None:  # fmt: skip
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = []
            heappush(self.keys, key)
        self.serial += 1
        span.serial = self.serial
        heappush(bucket, ((rank[0], rank[1], -hi), self.serial, span, stop))

    def evict(self, count: int) -> int:
        freed = 0
        keys, buckets, cached_free = self.keys, self.buckets, self.kv.cached_free
        while freed < count and keys:
            key = keys[0]
            bucket = buckets[key]
            if not bucket:
                heappop(keys)
                del buckets[key]
                continue
            rank, serial, span, stop = heappop(bucket)
            if span.serial != serial:  # stale: re-ranked, referenced or dropped since
                continue
            if isinstance(span, OwnSpan):
                lo, hi = 0, span.count if cached_free.get(span.key) is span else 0
            else:
                lo, hi = span.lo, span.hi if span.refs == 0 else span.lo
            if hi <= lo:
                continue
            run = hi - (stop if stop > lo else lo)  # the tail blocks under this key
            take = run if run <= count - freed else count - freed
            self._drop_tail(span, take)
            freed += take
            if take < hi - lo:
                self.mark(span, rank)
            else:
                self.forget(span)
        self.kv.cached_blocks -= freed
        return freed


class ClassKeyedEvictions(SpanKeyedEvictions):
    """Span keys that also read ``depth_class``: a span is keyed by its tail block's
    class, asked once per distinct (hits, last access, class), and evicted a class at a
    time, from the class's smallest depth (``2 ** (class - 1)``) on. Deeper classes must
    not rank after shallower ones (as for bisecting above)."""

    def _key(self, span: Span | OwnSpan, j: int) -> tuple[Any, ...]:
        base = span.first_depth if isinstance(span, OwnSpan) else span.depth0
        fields = (span.num_hits, span.last_access, (base + j).bit_length())
        key = self.memo.get(fields)
        if key is None:
            if len(self.memo) >= MEMO_LIMIT:
                self.memo.clear()
            kv = self.kv
            key = flat_key(kv._facade.eviction_key(self._view(span, j), kv._engine) or ())
            self.memo[fields] = key
        return key

    def mark(
        self, span: Span | OwnSpan, rank: tuple[int, int, int], *, fresh: bool = False
    ) -> None:
        if isinstance(span, OwnSpan):
            lo, hi, base = 0, span.count, span.first_depth
        else:
            lo, hi, base = span.lo, span.hi, span.depth0
        if hi <= lo:
            return
        tail = base + hi - 1
        depth_class = tail.bit_length()
        key = self.memo.get((span.num_hits, span.last_access, depth_class))
        if key is None:  # the tail may be in another class now: keyed anew
            key = self._key(span, hi - 1)
        first = 1 << (depth_class - 1) if depth_class else 0
        bucket = self.buckets.get(key)  # _push, inlined: this runs once per run freed
        if bucket is None:
            bucket = self.buckets[key] = []
            heappush(self.keys, key)
        self.serial += 1
        span.serial = self.serial
        heappush(bucket, ((rank[0], rank[1], -hi), self.serial, span, first - base))
