"""Paged KV cache with prefix caching, following vLLM V1's block pool.

Blocks are cached by hash once full and computed. Free blocks are either never cached
(used first) or cached-but-unreferenced, kept least recently used first and evicted from
the front, as vLLM's free block queue does. A request's blocks are freed tail first, so
its last blocks are evicted before its prefix.

Two kinds of cached data, so cost follows requests rather than blocks:
- shared blocks (a trace's prefix hashes, e.g. Mooncake's), cached one by one by hash;
- a request's own blocks (everything no other request can share), cached as one *run*
  per request: its first ``count`` own blocks, which only that request can hit again
  (after a preemption). Evicting from a run drops its last blocks first, as vLLM's
  tail-first order does.

An eviction policy is offered only the oldest evictable blocks, the *eviction window*
(``SimConfig.eviction_window``), and views are built for those alone: building one per
evictable block on every call made policy eviction many times slower than LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from schedkit.facade import PolicyFacade
from schedkit.sim.config import DEFAULT_EVICTION_WINDOW, EVICTION_WINDOW_PER_BLOCK
from schedkit.views import BlockState, BlockView, EngineState


class Run:
    """The cached own blocks of one request: its first ``count`` own blocks."""

    __slots__ = ("count", "first_depth", "key", "last_access", "num_hits")

    def __init__(self, key: int, count: int, first_depth: int, clock: float) -> None:
        self.key = key
        self.count = count
        self.first_depth = first_depth
        self.last_access = clock
        self.num_hits = 0


class KVCache:
    """Block accounting for the simulated engine."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        prefix_caching: bool,
        facade: PolicyFacade,
        engine: EngineState,
        eviction_window: int = DEFAULT_EVICTION_WINDOW,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free_uncached = num_blocks
        # Evictable cached data, least recently used first: shared hash -> BlockState,
        # or run key (negative) -> Run.
        self.cached_free: OrderedDict[int, BlockState | Run] = OrderedDict()
        self.cached_blocks = 0  # blocks held by cached_free
        self.in_use: dict[int, int] = {}  # shared hash -> requests referencing it
        self.meta: dict[int, BlockState] = {}  # every cached shared hash, in use or free
        self.evictions = 0
        self.eviction_window = eviction_window  # 0: offer every evictable block
        self._facade = facade
        self._engine = engine

    @property
    def num_free(self) -> int:
        return self.free_uncached + self.cached_blocks

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.free_uncached - self.cached_blocks

    def run_hit(self, key: int) -> int:
        """Cached own blocks of the request with run ``key``."""
        run = self.cached_free.get(key)
        return run.count if isinstance(run, Run) else 0

    def can_allocate(self, hit: Sequence[int], own_hit: int, num_new: int) -> bool:
        """Whether ``num_new`` fresh blocks fit after reclaiming the hit blocks."""
        cached_free = self.cached_free
        reclaimed = own_hit + sum(1 for h in hit if h in cached_free)
        return num_new <= self.free_uncached + self.cached_blocks - reclaimed

    def touch(self, hit: Sequence[int], run_key: int, own_hit: int, clock: float) -> None:
        """Reference the cached blocks a request found (a prefix-cache hit)."""
        in_use, cached_free, meta = self.in_use, self.cached_free, self.meta
        for h in hit:
            block = meta[h]
            block.num_hits += 1
            block.last_access = clock
            if h in in_use:
                in_use[h] += 1
            else:
                del cached_free[h]
                self.cached_blocks -= 1
                in_use[h] = 1
        if own_hit:
            run = cached_free.pop(run_key)
            self.cached_blocks -= run.count if isinstance(run, Run) else 1

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
        freed = self._evict_by_policy(evict) if self._facade.has_evictions else 0
        if freed < evict:
            self._evict_lru(evict - freed)
        elif freed > evict:
            self.free_uncached += freed - evict

    def _evict_lru(self, count: int) -> None:
        cached_free, meta = self.cached_free, self.meta
        while count:
            key, entry = next(iter(cached_free.items()))
            if isinstance(entry, Run) and entry.count > count:
                entry.count -= count  # drop the run's last blocks, keep its place
                self.cached_blocks -= count
                return
            del cached_free[key]
            if isinstance(entry, Run):
                count -= entry.count
                self.cached_blocks -= entry.count
            else:
                del meta[key]
                count -= 1
                self.cached_blocks -= 1

    def _evict_by_policy(self, count: int) -> int:
        """Ask the policy which blocks to evict; returns how many blocks it freed.

        It sees the least recently used evictable blocks, at most
        ``max(eviction_window, EVICTION_WINDOW_PER_BLOCK * count)`` of them.
        """
        window = self.eviction_window
        limit = max(window, EVICTION_WINDOW_PER_BLOCK * count) if window else self.cached_blocks
        candidates: list[BlockView] = []
        runs: dict[int, Run] = {}
        for key, entry in self.cached_free.items():
            left = limit - len(candidates)
            if left <= 0:
                break
            if isinstance(entry, Run):
                # A run's blocks were freed tail first, so its last block is the least
                # recently used (vLLM's free queue order): offered last block first. A run
                # the window cuts offers its last blocks; evicting one drops only blocks
                # inside the window.
                for j in reversed(range(max(0, entry.count - left), entry.count)):
                    own = BlockState(
                        own_block_hash(key, j), entry.first_depth + j, entry.last_access
                    )
                    own.num_hits = entry.num_hits
                    candidates.append(own)
                    runs[own.block_hash] = entry
            else:
                candidates.append(entry)
        self._engine.kv_blocks_free = self.num_free
        chosen = self._facade.select_evictions(candidates, count, self._engine)
        if chosen is None:
            return 0
        freed = 0
        for block in chosen[:count]:
            h = block.block_hash
            run = runs.get(h)
            if run is None:
                del self.cached_free[h]
                del self.meta[h]
                freed += 1
                continue
            keep = block.depth - run.first_depth  # a run is a prefix: drop from there on
            if keep < run.count:
                freed += run.count - keep
                run.count = keep
                if keep == 0:
                    del self.cached_free[run.key]
        self.cached_blocks -= freed
        return freed

    def cache_block(self, h: int, depth: int, clock: float) -> bool:
        """Publish a request's newly full shared block under hash ``h``.

        Returns False when another copy is already cached; the caller keeps its block
        private (vLLM keeps such duplicates out of the cache too).
        """
        if h in self.meta:
            return False
        self.meta[h] = BlockState(h, depth, clock)
        self.in_use[h] = 1
        return True

    def free(
        self,
        shared: Sequence[int | None],
        private: int,
        run_key: int,
        run: int,
        run_depth: int,
        clock: float,
    ) -> None:
        """Release a request's blocks, tail first: own run, then shared ones backwards.

        ``shared`` lists its shared-prefix blocks (hash, or None when private),
        ``private`` counts its other uncached blocks, ``run`` its cached own blocks.
        """
        self.free_uncached += private
        cached_free = self.cached_free
        stale = cached_free.pop(run_key, None)
        if isinstance(stale, Run):  # cached before a readmission that did not hit it
            self.cached_blocks -= stale.count
            self.free_uncached += stale.count
        if run:
            cached_free[run_key] = Run(run_key, run, run_depth, clock)
            self.cached_blocks += run
        in_use, meta = self.in_use, self.meta
        for h in reversed(shared):
            if h is None:
                self.free_uncached += 1
                continue
            refs = in_use[h] - 1
            if refs:
                in_use[h] = refs
            else:
                del in_use[h]
                block = meta[h]
                block.last_access = clock
                cached_free[h] = block
                self.cached_blocks += 1

    def check(self, held: int) -> None:
        """Assert block conservation given the blocks requests hold privately (tests)."""
        total = self.free_uncached + self.cached_blocks + len(self.in_use) + held
        assert total == self.num_blocks, (total, self.num_blocks)
        counted = sum(e.count if isinstance(e, Run) else 1 for e in self.cached_free.values())
        assert counted == self.cached_blocks, (counted, self.cached_blocks)
        shared_free = {k for k, e in self.cached_free.items() if not isinstance(e, Run)}
        assert set(self.meta) == set(self.in_use) | shared_free


def own_block_hash(run_key: int, j: int) -> int:
    """A distinct negative hash for a request's j-th own block (the j-th block of its run):
    the ``block_hash`` of its eviction candidate and an entry of the request's
    ``block_hashes``. Shared blocks' hashes are >= 0."""
    return run_key * (1 << 24) - j
