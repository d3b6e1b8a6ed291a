"""LMDeploy's real ``Scheduler`` without a model, as LMDeploy's own scheduler tests build it
(``tests/pytorch/paging/test_scheduler.py``), and checks of its KV blocks: what the contract
driver (``harness.contract``), the adapter's tests and the overhead benchmark run on CPU.
"""

from __future__ import annotations

from typing import Any

from schedkit_lmdeploy.views import trie_blocks

__all__ = ["PREFILL_INTERVAL", "build_scheduler", "cached_only_blocks", "check_blocks"]

PREFILL_INTERVAL = 16  # SchedulerConfig's default: decode steps between forced prefills


def build_scheduler(
    num_blocks: int,
    block_size: int,
    max_batches: int,
    max_prefill_tokens: int,
    prefix_caching: bool = True,
) -> Any:
    """LMDeploy's ``Scheduler`` without a model, as its own tests build it."""
    from lmdeploy.pytorch.config import CacheConfig, SchedulerConfig
    from lmdeploy.pytorch.messages import SequenceMeta
    from lmdeploy.pytorch.paging.scheduler import Scheduler
    from lmdeploy.pytorch.strategies.ar.sequence import ARSequenceStrategy

    limits = SchedulerConfig(
        max_batches=max_batches,
        max_session_len=1 << 20,
        eviction_type="recompute",
        prefill_interval=PREFILL_INTERVAL,
    )
    cache = CacheConfig(
        max_batches=max_batches,
        block_size=block_size,
        num_cpu_blocks=0,
        num_gpu_blocks=num_blocks,
        max_prefill_token_num=max_prefill_tokens,
        enable_prefix_caching=prefix_caching,
    )
    meta = SequenceMeta(block_size, strategy=ARSequenceStrategy())
    return Scheduler(scheduler_config=limits, cache_config=cache, seq_meta=meta)


def check_blocks(scheduler: Any, num_blocks: int) -> None:
    """Every GPU block is free, held by a sequence, or held by the prefix trie, and each
    held block's ref count is its number of owners (sequences holding it, plus one for
    the trie): no block is lost, leaked or shared by mistake."""
    owners: dict[int, int] = {}
    for seq in scheduler.seq_manager.get_all_sequences():
        for block in seq.logical_blocks.get_real_blocks():
            owners[int(block)] = owners.get(int(block), 0) + 1
    for node in trie_blocks(scheduler.block_trie):
        owners[int(node.block_id)] = owners.get(int(node.block_id), 0) + 1
    free = int(scheduler.block_manager.get_num_free_gpu_blocks())
    assert free + len(owners) == num_blocks, (
        f"{free} free and {len(owners)} held blocks of {num_blocks}: blocks lost or shared"
    )
    allocator = scheduler.block_manager.allocator
    wrong = {b: (n, int(allocator.get_ref_count(b))) for b, n in owners.items()
             if int(allocator.get_ref_count(b)) != n}  # fmt: skip
    assert not wrong, f"blocks whose ref count is not their owners' number: {wrong}"


def cached_only_blocks(scheduler: Any) -> int:
    """Blocks the prefix trie alone holds (cached, evictable)."""
    allocator = scheduler.block_manager.allocator
    trie = scheduler.block_trie
    return sum(1 for n in trie_blocks(trie) if int(allocator.get_ref_count(n.block_id)) == 1)
