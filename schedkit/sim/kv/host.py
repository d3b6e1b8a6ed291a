"""A host-memory KV tier behind the simulated GPU prefix cache (vLLM's CPU offloading).

vLLM 0.34's offloading connector (``--kv-offloading-size`` GiB, ``OffloadingConnector``)
writes every full, computed KV block through to a CPU buffer as it is computed, and when
a waiting request's prefix is cached there beyond what the GPU prefix cache holds, loads
those blocks back asynchronously instead of recomputing them. This module keeps that
buffer's contents; ``schedkit.sim.offload`` times the loads.

Contents are kept per *run*: the stored leading blocks of one trace hash group (shared
prefix blocks, ``SimConfig.hash_block_tokens``) or of one request's own blocks, in LRU
order, so storing and looking up cost per group, not per block. A run grows only from
its end: a block stored after a gap (its predecessors dropped) could never be reached by
a prefix lookup, and is not kept (vLLM keeps it, unreachable, until evicted).

When the buffer is full, the oldest runs lose blocks from their end. With eviction hooks
(``select_evictions``, ``eviction_key``) the policy decides as on the GPU tier: it is
offered the blocks of the oldest runs, last blocks first, up to the eviction window, and
evicting a block drops the blocks after it in its run (unreachable without it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from schedkit.sim.kv.blocks import OWN_SHIFT, own_block_hash, own_key_of
from schedkit.views import BlockSnapshot

if TYPE_CHECKING:
    from collections.abc import Iterator

    from schedkit.facade import PolicyFacade
    from schedkit.sim.kv.blocks import BlockTable
    from schedkit.views import EngineView

__all__ = ["HostRun", "HostTier"]


class HostRun:
    """The first ``hi`` blocks of one group (key >= 0) or one request's own blocks (< 0)."""

    __slots__ = ("depth0", "hi", "last_access", "num_hits")

    def __init__(self, hi: int, depth0: int, clock: float) -> None:
        self.hi = hi
        self.depth0 = depth0  # the first block's index in a prompt
        self.last_access = clock
        self.num_hits = 0


class HostTier:
    """The CPU buffer's contents: ``capacity`` blocks, least recently used runs first."""

    def __init__(
        self,
        capacity: int,
        group_blocks: int,
        facade: PolicyFacade,
        engine: EngineView,
        eviction_window: int,
    ) -> None:
        self.capacity = capacity
        self.per = group_blocks  # engine blocks per trace hash id (0: none shared)
        self.runs: OrderedDict[int, HostRun] = OrderedDict()
        self.used = 0
        self.evictions = 0
        self._facade = facade
        self._engine = engine
        self._window = eviction_window  # 0: every stored block is a candidate

    # -- what a table's blocks are ------------------------------------------------------

    def _pieces(
        self, table: BlockTable, first: int, end: int
    ) -> Iterator[tuple[int, int, int, int]]:
        """Blocks ``first..end-1`` of ``table`` as (run key, lo, hi, depth of block 0)."""
        per, num_shared = self.per, table.num_shared if self.per else 0
        if first < num_shared:
            stop = min(end, num_shared)
            for p in range(first // per, (stop - 1) // per + 1):
                base = p * per
                yield table.groups[p], max(first - base, 0), min(stop - base, per), base
        if end > num_shared:
            yield table.key, max(first, num_shared) - num_shared, end - num_shared, num_shared

    # -- storing, finding, loading ------------------------------------------------------

    def store(self, table: BlockTable, first: int, end: int, clock: float) -> None:
        """Write blocks ``first..end-1`` of ``table``, just computed, through to the tier."""
        runs = self.runs
        for key, lo, hi, depth0 in self._pieces(table, first, end):
            run = runs.get(key)
            if run is None:
                if lo:
                    continue  # after a gap: unreachable
                runs[key] = HostRun(hi, depth0, clock)
                self.used += hi
                continue
            if lo <= run.hi < hi:
                self.used += hi - run.hi
                run.hi = hi
            if lo <= run.hi:
                run.last_access = clock
                runs.move_to_end(key)
        if self.used > self.capacity:
            self.evict(self.used - self.capacity)

    def lookup(self, table: BlockTable, start: int, limit: int) -> int:
        """How many blocks after the first ``start`` of ``table`` (at most up to ``limit``)
        the tier holds, contiguously."""
        pos, runs = start, self.runs
        for key, lo, hi, _ in self._pieces(table, start, limit):
            run = runs.get(key)
            if run is None or run.hi <= lo:
                break
            pos += min(run.hi, hi) - lo
            if run.hi < hi:
                break
        return pos - start

    def load(self, table: BlockTable, start: int, count: int, clock: float) -> None:
        """A request reads blocks ``start..start+count-1`` (found by ``lookup``)."""
        runs = self.runs
        for key, _, _, _ in self._pieces(table, start, start + count):
            run = runs[key]
            run.num_hits += 1
            run.last_access = clock
            runs.move_to_end(key)

    # -- evicting -------------------------------------------------------------------------

    def evict(self, count: int) -> None:
        """Free ``count`` blocks: the policy's choice, if it gives one, then LRU."""
        self.evictions += count
        if self._facade.has_evictions:
            count -= self._evict_by_policy(count)
        runs = self.runs
        while count > 0:
            key, run = next(iter(runs.items()))
            if run.hi > count:
                run.hi -= count  # its last blocks; it keeps its place
                self.used -= count
                return
            del runs[key]
            self.used -= run.hi
            count -= run.hi

    def _evict_by_policy(self, count: int) -> int:
        """Ask the policy which of the oldest runs' blocks to drop; blocks freed."""
        window = max(self._window, 4 * count) if self._window else self.used
        candidates: list[BlockSnapshot] = []
        for key, run in self.runs.items():
            for j in range(run.hi - 1, -1, -1):
                block_hash = key * self.per + j if key >= 0 else own_block_hash(key, j)
                candidates.append(
                    BlockSnapshot(block_hash, run.depth0 + j, run.last_access, run.num_hits)
                )
            if len(candidates) >= window:
                break
        picked = self._facade.select_evictions(candidates[:window], count, self._engine)
        freed = 0
        for view in picked or ():
            if freed >= count:
                break
            block_hash = view.block_hash
            if block_hash >= 0:
                key, j = divmod(block_hash, self.per)
            else:
                key = own_key_of(block_hash)
                j = key * (1 << OWN_SHIFT) - block_hash
            cut = self.runs.get(key)
            if cut is None or cut.hi <= j:
                continue  # dropped with an earlier block of its run
            freed += cut.hi - j
            self.used -= cut.hi - j
            cut.hi = j
            if not j:
                del self.runs[key]
        return freed
