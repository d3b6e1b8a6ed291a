"""Eviction by ``eviction_key`` in the simulated KV cache: the engine keeps the order.

Every evictable span (``schedkit.sim.kv.blocks``) is in a heap by the key of its tail block,
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
LRU order under one heap item per key; a release's spans go in as runs (consecutive spans
alike in key), one bucket entry per run rather than per span. The order is the same; only
the cost differs.
A key that reads depth only through ``depth_class`` (``depth.bit_length()``) is keyed
likewise a class at a time (``ClassKeyedEvictions``): a span goes in the bucket of its
tail block's class, and evicting takes its blocks in that class, then ranks it again.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any

from schedkit.sim.kv.blocks import CacheState, OwnSpan, Span, own_block_hash
from schedkit.views import BlockSnapshot

__all__ = ["ClassKeyedEvictions", "KeyedEvictions", "SpanKeyedEvictions", "keyed_evictions"]

MEMO_LIMIT = 1 << 16  # span keys remembered; forgotten all at once beyond
Item = tuple[tuple[Any, ...], tuple[int, int, int], int, Any]  # key, LRU rank, serial, span
RunItem = tuple[tuple[int, int, int], Span | OwnSpan, int]  # a span in a run: LRU rank, span, stop
Entry = tuple[tuple[int, int, int], int, list[RunItem], int]  # rank, serial, run, its next


def keyed_evictions(kv: CacheState) -> KeyedEvictions:
    """The key order for ``kv``'s policy: by span when its key reads no block's hash or
    depth (by span and depth class when it reads ``depth_class``), else by block."""
    reads = kv._facade.eviction_key_reads
    if reads is not None and not reads & {"block_hash", "depth"}:
        return ClassKeyedEvictions(kv) if "depth_class" in reads else SpanKeyedEvictions(kv)
    return KeyedEvictions(kv)


class KeyedEvictions:
    """The evictable spans of one KV cache in ``eviction_key`` order."""

    span_keys = False  # keys of whole spans, by (num_hits, last_access)

    def __init__(self, kv: CacheState) -> None:
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
            key = kv._facade.flat_eviction_key(self._view(span, j), kv._engine)
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

    def mark_freed(self, spans: list[Span]) -> None:
        """The shared spans one release freed are evictable now: ``mark(s, s.rank,
        fresh=True)`` for each (the bucketed orders inline it: it runs per span freed)."""
        for span in spans:
            self.mark(span, span.rank, fresh=True)

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
    and per key a heap of *runs* by LRU rank. A run is spans of one release alike in key,
    in LRU order (rank, span, and where its blocks under the key start: ``stop``, its
    ``lo`` here), all with the run's serial; the entry holds the run and its next span.
    A release pushes a run, not each span, and evicting walks a run while its next span
    still ranks before the bucket's next entry: the order is the per-span heap's."""

    span_keys = True
    by_class = False  # keys read depth_class: a span is keyed by its tail block's class

    def __init__(self, kv: CacheState) -> None:
        super().__init__(kv)
        self.buckets: dict[tuple[Any, ...], list[Entry]] = {}
        self.keys: list[tuple[Any, ...]] = []  # heap of the buckets' keys

    def _place(self, span: Span | OwnSpan, lo: int, hi: int, base: int) -> tuple[Any, int]:
        """The key of the span's blocks from its tail back, and where they start."""
        if not self.by_class:
            key = self.memo.get((span.num_hits, span.last_access))
            return (self._key(span, hi - 1) if key is None else key), lo
        depth_class = (base + hi - 1).bit_length()
        key = self.memo.get((span.num_hits, span.last_access, depth_class))
        if key is None:  # the tail may be in another class now: keyed anew
            key = self._key(span, hi - 1)
        return key, (1 << (depth_class - 1) if depth_class else 0) - base

    def _bucket(self, key: tuple[Any, ...]) -> list[Entry]:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = []
            heappush(self.keys, key)
        return bucket

    def mark(
        self, span: Span | OwnSpan, rank: tuple[int, int, int], *, fresh: bool = False
    ) -> None:
        if isinstance(span, OwnSpan):
            lo, hi, base = 0, span.count, span.first_depth
        else:
            lo, hi, base = span.lo, span.hi, span.depth0
        if hi <= lo:
            return
        key, stop = span.ukey, lo
        if key is None or fresh or self.by_class:
            key, stop = self._place(span, lo, hi, base)
            span.ukey = key
        self.serial += 1
        span.serial = self.serial
        at = (rank[0], rank[1], -hi)
        heappush(self._bucket(key), (at, self.serial, [(at, span, stop)], 0))

    def mark_freed(self, spans: list[Span]) -> None:
        serial, run_key, memo, by_class = self.serial, None, self.memo, self.by_class
        run: list[RunItem] = []
        for span in spans:
            lo, hi = span.lo, span.hi
            if hi <= lo:
                continue
            if by_class:  # _place, inlined: this runs once per span freed
                base = span.depth0
                depth_class = (base + hi - 1).bit_length()
                key = memo.get((span.num_hits, span.last_access, depth_class))
                if key is None:
                    key = self._key(span, hi - 1)
                stop = (1 << (depth_class - 1) if depth_class else 0) - base
            else:
                key, stop = memo.get((span.num_hits, span.last_access)), lo
                if key is None:
                    key = self._key(span, hi - 1)
            span.ukey = key
            rank = span.rank
            at = (rank[0], rank[1], -hi)
            if key != run_key:
                serial += 1
                run, run_key = [], key
                heappush(self._bucket(key), (at, serial, run, 0))
            span.serial = serial
            run.append((at, span, stop))
        self.serial = serial

    def evict(self, count: int) -> int:
        # ``_drop_tail`` and ``forget`` inlined: this loop runs once per span evicted
        freed = 0
        kv = self.kv
        keys, buckets, cached_free = self.keys, self.buckets, kv.cached_free
        while freed < count and keys:
            key = keys[0]
            bucket = buckets[key]
            if not bucket:
                heappop(keys)
                del buckets[key]
                continue
            _, serial, run, i = heappop(bucket)
            end = len(run)
            while i < end:
                if i and bucket and bucket[0][0] < run[i][0]:  # the bucket's next goes first
                    heappush(bucket, (run[i][0], serial, run, i))
                    break
                rank, span, stop = run[i]
                i += 1
                if span.serial != serial:  # stale: re-ranked, referenced or dropped since
                    continue
                if isinstance(span, OwnSpan):
                    if span is not cached_free.get(span.key):
                        continue
                    lo, hi = 0, span.count
                elif span.refs:
                    continue
                else:
                    lo, hi = span.lo, span.hi
                if hi <= lo:
                    continue
                under = hi - (stop if stop > lo else lo)  # the tail blocks under this key
                take = under if under <= count - freed else count - freed
                freed += take
                if take < hi - lo:  # its head stays: ranked again, and the run waits
                    if isinstance(span, OwnSpan):
                        span.count -= take
                    else:
                        span.hi -= take
                    self.mark(span, rank)
                    if i < end:
                        heappush(bucket, (run[i][0], serial, run, i))
                    break
                span.serial = 0
                span.ukey = None
                if isinstance(span, OwnSpan):
                    span.count = 0
                    del cached_free[span.key]
                else:
                    span.hi = lo
                    kv._unlist(span)
                    kv._drop(span)
                if freed >= count:
                    if i < end:
                        heappush(bucket, (run[i][0], serial, run, i))
                    break
        kv.cached_blocks -= freed
        return freed


class ClassKeyedEvictions(SpanKeyedEvictions):
    """Span keys that also read ``depth_class``: a span is keyed by its tail block's
    class, asked once per distinct (hits, last access, class), and evicted a class at a
    time, from the class's smallest depth (``2 ** (class - 1)``) on. Deeper classes must
    not rank after shallower ones (as for bisecting above)."""

    by_class = True

    def _key(self, span: Span | OwnSpan, j: int) -> tuple[Any, ...]:
        base = span.first_depth if isinstance(span, OwnSpan) else span.depth0
        fields = (span.num_hits, span.last_access, (base + j).bit_length())
        key = self.memo.get(fields)
        if key is None:
            if len(self.memo) >= MEMO_LIMIT:
                self.memo.clear()
            kv = self.kv
            key = kv._facade.flat_eviction_key(self._view(span, j), kv._engine)
            self.memo[fields] = key
        return key
