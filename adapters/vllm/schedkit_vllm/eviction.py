"""KV eviction: let ``select_evictions`` choose which cached blocks vLLM reuses.

vLLM's ``BlockPool.get_new_blocks`` pops blocks from the front of its free-block queue
and drops the prefix-cache entry of any cached one among them; the queue holds never-
cached blocks first, then cached, unreferenced blocks least recently used first. This
hook replaces, on one pool instance only, the queue's ``popleft_n`` (so vLLM's own
allocation path asks the policy whenever it must evict) and wraps ``free_blocks`` and
``touch`` to record when each cached block was last freed or hit, which vLLM does not.

Cost: nothing while never-cached blocks last; under eviction one walk of the front of the
free queue per allocation, up to the eviction window: the ``max(eviction_window, 4 * n)``
least recently freed cached blocks for an allocation of ``n`` blocks are the candidates
(the simulator's default window; ``eviction_window=0`` walks the whole queue). Never-
cached blocks met on the way are handed out first; those further back are newer than
every candidate and wait their turn, as in vLLM's own front-first order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from schedkit import PolicyFacade

from schedkit_vllm.metrics import SchedkitMetrics
from schedkit_vllm.views import VllmBlockView, VllmEngineView

# Candidates per eviction, at least, and per block allocated (schedkit.sim's defaults).
EVICTION_WINDOW = 4096
EVICTION_WINDOW_PER_BLOCK = 4


class EvictionHook:
    """Installed on one ``BlockPool`` when the selected policies implement eviction."""

    def __init__(
        self,
        pool: Any,
        facade: PolicyFacade,
        engine: VllmEngineView,
        *,
        eviction_window: int = EVICTION_WINDOW,
    ) -> None:
        self.pool = pool
        self.eviction_window = eviction_window  # 0: every cached block is a candidate
        self.queue = pool.free_block_queue
        self.facade = facade
        self.engine = engine
        self.hash_block_size = int(pool.hash_block_size)
        self.records: dict[int, VllmBlockView] = {}
        self.num_evicted_by_policy = 0
        self.metrics: SchedkitMetrics | None = None  # set by the runtime
        self._popleft_n: Callable[[int], list[Any]] = self.queue.popleft_n
        self._free_blocks: Callable[[Iterable[Any]], None] = pool.free_blocks
        self._touch: Callable[[Sequence[Any]], None] = pool.touch
        # Instance attributes shadow the class's methods, for this pool only.
        self.queue.popleft_n = self.popleft_n
        pool.free_blocks = self.free_blocks
        pool.touch = self.touch

    def _record(self, block: Any) -> VllmBlockView:
        record = self.records.get(block.block_id)
        if record is None or record.block is not block:
            record = VllmBlockView(block, self.hash_block_size)
            self.records[block.block_id] = record
        return record

    def free_blocks(self, ordered_blocks: Iterable[Any]) -> None:
        blocks = list(ordered_blocks)
        self._free_blocks(blocks)
        now = self.engine.clock
        for block in blocks:
            if block.ref_cnt == 0 and block.block_hash is not None:
                self._record(block).freed(now)

    def touch(self, blocks: Sequence[Any]) -> None:
        self._touch(blocks)
        now = self.engine.clock
        for block in blocks:
            if block.block_hash is not None and not block.is_null:
                self._record(block).hit(now)

    def popleft_n(self, n: int) -> list[Any]:
        if n <= 0:
            return self._popleft_n(n)
        tail = self.queue.fake_free_list_tail
        block = self.queue.fake_free_list_head.next_free_block
        seen = 0
        while seen < n and block is not tail and block.block_hash is None:
            seen += 1
            block = block.next_free_block
        if seen == n:  # no cached block among them: nothing is evicted
            return self._popleft_n(n)
        chosen = self._choose(n)
        if chosen is None:
            chosen = self._popleft_n(n)
        else:
            for block in chosen:
                self.queue.remove(block)
        for block in chosen:
            # Their prefix-cache entries are dropped by vLLM right after this returns.
            self.records.pop(block.block_id, None)
        return chosen

    def _choose(self, n: int) -> list[Any] | None:
        """The blocks to hand out: never-cached ones first, then the policy's choice."""
        window = self.eviction_window
        limit = max(window, EVICTION_WINDOW_PER_BLOCK * n) if window else -1
        uncached: list[Any] = []
        cached: list[Any] = []
        tail = self.queue.fake_free_list_tail
        block = self.queue.fake_free_list_head.next_free_block
        while block is not tail and len(cached) != limit:
            (uncached if block.block_hash is None else cached).append(block)
            block = block.next_free_block
        if len(uncached) >= n:
            return uncached[:n]
        need = n - len(uncached)
        candidates = [self._record(b) for b in cached]
        started = time.perf_counter()
        picked = self.facade.select_evictions(candidates, need, self.engine)
        if self.metrics is not None:
            self.metrics.hook("select_evictions", time.perf_counter() - started, picked is not None)
        if picked is None:
            return None
        self.num_evicted_by_policy += need
        return uncached + [cast(VllmBlockView, view).block for view in picked[:need]]
