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
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from schedkit.sim.blocks import OwnSpan, Span, own_block_hash
from schedkit.views import BlockSnapshot

if TYPE_CHECKING:
    from schedkit.sim.kvcache import KVCache

__all__ = ["KeyedEvictions"]

Item = tuple[tuple[Any, ...], tuple[int, int, int], int, Any]  # key, LRU rank, serial, span


class KeyedEvictions:
    """The evictable spans of one KV cache in ``eviction_key`` order."""

    def __init__(self, kv: KVCache) -> None:
        self.kv = kv
        self.heap: list[Item] = []
        self.serial = 0
        self.current: dict[int, int] = {}  # id(span) -> serial of its live heap item
        # id(span) -> the key of every block of it, once its head and tail key alike
        self.uniform: dict[int, tuple[Any, ...]] = {}

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
        kv = self.kv
        return kv._facade.eviction_key(self._view(span, j), kv._engine) or ()

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
        key = None if fresh else self.uniform.get(id(span))
        if key is None:
            self.uniform.pop(id(span), None)
            key = self._key(span, hi - 1)
        self.serial += 1
        self.current[id(span)] = self.serial
        heappush(self.heap, (key, (rank[0], rank[1], -hi), self.serial, span))

    def split(self, low: Span, top: Span) -> None:
        """A free span was cut in two: both rank anew, with its key if it was uniform."""
        key = self.uniform.get(id(low))
        if key is not None:
            self.uniform[id(top)] = key
        else:
            self.uniform.pop(id(top), None)
        self.mark(low, low.rank)
        self.mark(top, top.rank)

    def _live(self, item: Item) -> bool:
        span = item[3]
        if self.current.get(id(span)) != item[2]:
            return False
        if isinstance(span, OwnSpan):
            return self.kv.cached_free.get(span.key) is span and span.count > 0
        return span.refs == 0 and span.lo < span.hi and span in self.kv.groups.get(span.group, ())

    def _top(self) -> Item | None:
        heap = self.heap
        while heap and not self._live(heap[0]):
            _, _, serial, span = heappop(heap)
            if self.current.get(id(span)) == serial:  # its last item: forget it
                self.forget(span)
        return heap[0] if heap else None

    def forget(self, span: Span | OwnSpan) -> None:
        self.current.pop(id(span), None)
        self.uniform.pop(id(span), None)

    # -- evicting -----------------------------------------------------------------------

    def evict(self, count: int) -> int:
        """Evict ``count`` blocks, lowest keys first; returns how many were freed (fewer
        only when nothing evictable is left)."""
        freed = 0
        while freed < count:
            top = self._top()
            if top is None:
                break
            key, rank, _, span = heappop(self.heap)
            lo, hi = self._bounds(span)
            nxt = self._top()
            take = hi - lo
            if nxt is not None and take > 1 and id(span) not in self.uniform:
                bar = (nxt[0], nxt[1])
                head = self._key(span, lo)
                if head == key:  # alike from head to tail: all of it goes first
                    self.uniform[id(span)] = key
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
