"""``select_evictions`` and ``eviction_key`` inside LMDeploy: its prefix trie's leaf eviction.

LMDeploy evicts cached blocks from its prefix trie (``KVBlockLifecycle.evict``): leaves
only (a block deeper in a prefix goes before the blocks it hangs from), those only the
trie holds (ref count 1), least recently used first, a parent joining the candidates when
its last child goes. With an eviction policy the evictable leaves are the candidates
(``BlockView`` s, one block each, all of them: no window), the policy's choices go first in
its order, a parent that becomes a leaf follows right after the chosen child (the policy
picks branches, not only their tips), and the leaves it did not name follow in LMDeploy's
own order. The checks LMDeploy makes before evicting a leaf (still a leaf, still
attached, not pinned by a state checkpoint, held by the trie alone) are the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

__all__ = ["evict"]


def evict(stock: Callable[..., Any]) -> Callable[..., Any]:
    def evict(self: Any, max_num_blocks: int) -> int:
        runtime = getattr(self, "schedkit", None)
        if runtime is None or not runtime.facade.has_evictions or not self.leaves:
            return int(stock(self, max_num_blocks))
        import numpy as np

        allocator = self.allocator
        leaves = [leaf for leaf in self.leaves if self._is_leaf_eviction_candidate(leaf)]
        refs = allocator.get_ref_count(np.array([leaf.block_id for leaf in leaves], dtype=int))
        free = [leaf for leaf, ref in zip(leaves, refs, strict=True) if int(ref) == 1]
        ranks = runtime.eviction_ranks(free, max_num_blocks) if free else None
        if ranks is None:
            return int(stock(self, max_num_blocks))
        self.leaves.intersection_update(leaves)
        order = {key: (rank, 0) for key, rank in ranks.items()}

        def item(node: Any) -> tuple[Any, ...]:
            rank = order.get(id(node))
            when = float(allocator.get_access_time(node.block_id))
            return ((0, *rank) if rank is not None else (1, when, 0), id(node), node)

        heap = [item(leaf) for leaf in free]
        heapq.heapify(heap)
        evicted: list[int] = []
        chosen = 0
        while heap and len(evicted) < max_num_blocks:
            leaf = heapq.heappop(heap)[2]
            if leaf not in self.leaves:
                continue
            if not self._is_leaf_eviction_candidate(leaf):
                self.leaves.discard(leaf)
                continue
            if self.state_checkpoints.is_pinned(leaf):
                continue
            if int(allocator.get_ref_count(leaf.block_id)) != 1:
                continue
            evicted.append(leaf.block_id)
            self.state_checkpoints.release_checkpoint(leaf)
            parent = leaf.parent
            if parent is not None:
                leaf.detach_leaf()
            self.leaves.discard(leaf)
            rank = order.get(id(leaf))
            chosen += rank is not None
            if parent is None or parent.parent is None or parent.children:
                continue
            if not self._is_attached_leaf(parent) or parent in self.leaves:
                continue
            self.leaves.add(parent)  # as LMDeploy: the parent is a leaf now
            if int(allocator.get_ref_count(parent.block_id)) == 1:
                if rank is not None:  # it follows its child: the policy picks branches
                    order.setdefault(id(parent), (rank[0], rank[1] + 1))
                heapq.heappush(heap, item(parent))
        if evicted:
            allocator.free(np.array(evicted))
            runtime.evicted(chosen)
        return len(evicted)

    return evict
