"""``tlru``: tail-optimized LRU eviction (Zhang, Li, Moallemi, Peng, *Tail-Optimized
Caching for LLM Inference*, NeurIPS 2025, arXiv:2510.15152; SGLang PR #34012, vLLM PR
#37825).

A conversation's next turn resends its history (``L`` tokens) plus a new message (about
``Q`` tokens). If its first ``B = max(0, L + Q - xi)`` tokens stay cached, the next turn
prefills at most ``xi`` uncached tokens: its TTFT stays within what ``xi`` allows. Blocks
past ``B`` are "tail-excess-latency safe": evicting them cannot push the next turn over.
T-LRU evicts those first (least recently used among them), then the rest by LRU.

Block by block, as vLLM's PR does: ``L`` is the longest history (prompt plus output, in
full blocks) of any request that listed the block in its ``block_hashes``, a high-water
mark as in SGLang's PR (it never shrinks, so trimming a conversation stops at ``B``
rather than walking it down to nothing). A block no tracked request listed is kept as
LRU would (never evict-first). Keys are asked when a block becomes evictable (vLLM's PR
also decides at free time), so a history that grows later applies from the block's next
free.
"""

from __future__ import annotations

from collections import OrderedDict

from pydantic import Field
from schedkit import BlockView, EngineView, Policy, PolicyOptions, RequestView, hookimpl

__all__ = ["TailOptimizedLRU"]


class TailOptimizedLRU(Policy):
    """Evict blocks past each conversation's tail budget first, then least recently used
    (see the module's docstring)."""

    class Options(PolicyOptions):
        xi_tokens: int = Field(
            default=2048,
            ge=0,
            le=1 << 24,
            description="The largest uncached prefill a next turn may need and still meet its"
            " TTFT target (tokens): about the TTFT target times the prefill rate, less the"
            " queueing you expect (SGLang's --tlru-threshold).",
        )
        next_prompt_tokens: int = Field(
            default=200,
            ge=0,
            le=1 << 24,
            description="Estimated length of a conversation's next message, tokens (vLLM's"
            " --tlru-qhat-tokens default, 200).",
        )
        max_tracked_blocks: int = Field(
            default=1_000_000,
            ge=1,
            le=1 << 26,
            description="Block histories kept, least recently updated dropped first (a dropped"
            " block is kept as LRU would).",
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self.history: OrderedDict[int, int] = OrderedDict()  # block hash -> L, full blocks

    def note(self, request: RequestView, block_size: int) -> None:
        """Raise the history of every block ``request`` lists to its length."""
        length = (request.num_prompt_tokens + request.num_output_tokens) // max(1, block_size)
        history, limit = self.history, self.options.max_tracked_blocks
        for block_hash in request.block_hashes:
            if history.get(block_hash, -1) < length:
                history[block_hash] = length
            history.move_to_end(block_hash)
        while len(history) > limit:
            history.popitem(last=False)

    def budget(self, block_hash: int, block_size: int) -> int | None:
        """``B`` in blocks: how many blocks of the block's conversation to keep; None when
        untracked."""
        length = self.history.get(block_hash)
        if length is None:
            return None
        opts, bs = self.options, max(1, block_size)
        next_blocks = -(-opts.next_prompt_tokens // bs)  # rounded up
        return max(0, length + next_blocks - opts.xi_tokens // bs)

    @hookimpl
    def on_request_arrived(self, request: RequestView, engine: EngineView) -> None:
        self.note(request, engine.block_size)

    @hookimpl
    def on_request_finished(self, request: RequestView, engine: EngineView) -> None:
        self.note(request, engine.block_size)  # its output is part of the history now

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> tuple[int, float]:
        keep = self.budget(block.block_hash, engine.block_size)
        safe = keep is not None and block.depth >= keep
        return (0 if safe else 1, block.last_access)
