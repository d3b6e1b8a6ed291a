"""What the router knows of each replica's prefix cache: the prompt blocks of the
requests it sent there.

Ray's ``PrefixCacheAffinityRouter`` keeps a character tree of the prompts it routed; this
keeps, per replica, the chained hashes of the prompts' full blocks of ``block_size`` tokens
(as vLLM hashes them: each block's hash covers every token before it), least recently
routed first out once a replica holds more than its bound. A prompt of token ids is hashed
as it is; text counts whitespace-separated words as tokens (``schedkit.edge.remote``'s
count: the router has no tokenizer).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from schedkit.edge.remote import block_hashes

__all__ = ["PrefixIndex", "block_hashes", "prompt_token_ids"]


def _words(value: Any) -> list[int]:
    if isinstance(value, str):
        return [zlib.crc32(word.encode()) for word in value.split()]
    if isinstance(value, list):  # chat content parts
        return [t for p in value if isinstance(p, dict) for t in _words(p.get("text", ""))]
    return []


def prompt_token_ids(body: Mapping[str, Any]) -> list[int]:
    """The prompt of an OpenAI body as tokens: its token ids, or its words hashed
    (a batch: its first prompt; chat: the messages' contents in order)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int) and not isinstance(first, bool):
            return [t for t in prompt if isinstance(t, int)]
        if isinstance(first, list):
            return [t for t in first if isinstance(t, int)]
        prompt = first
    if isinstance(prompt, str):
        return _words(prompt)
    messages = body.get("messages")
    if isinstance(messages, list):
        return [t for m in messages if isinstance(m, dict) for t in _words(m.get("content"))]
    return []


class PrefixIndex:
    """Per replica, the block hashes of the prompts routed there (bounded, LRU)."""

    def __init__(self, blocks_per_replica: int) -> None:
        if blocks_per_replica < 1:
            raise ValueError(f"blocks_per_replica must be >= 1, not {blocks_per_replica}")
        self.blocks_per_replica = blocks_per_replica
        self._blocks: dict[str, OrderedDict[int, None]] = {}

    def add(self, replica: str, hashes: Sequence[int], bound: int | None = None) -> None:
        """Record that ``replica`` was sent a prompt with these blocks; keep at most
        ``bound`` (default ``blocks_per_replica``) blocks for it, least recent out."""
        blocks = self._blocks.setdefault(replica, OrderedDict())
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        limit = bound if bound is not None and bound > 0 else self.blocks_per_replica
        while len(blocks) > limit:
            blocks.popitem(last=False)

    def matched_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` ``replica`` was sent."""
        blocks = self._blocks.get(replica)
        if not blocks:
            return 0
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def drop(self, replica: str) -> None:
        """Forget ``replica`` (it died: its cache is gone)."""
        self._blocks.pop(replica, None)

    def size(self, replica: str) -> int:
        return len(self._blocks.get(replica, ()))

    def replicas(self) -> list[str]:
        return sorted(self._blocks)
