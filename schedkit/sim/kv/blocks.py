"""The records the simulated KV cache keeps: spans of cached blocks and block tables.

Shared prefix blocks are grouped by trace hash id: a *group* is the ``per`` engine blocks
of one hash id (Mooncake: 512 tokens = 32 blocks of 16), named by block ``j`` within it.
A group's cached blocks are held as *spans*, ranges ``lo..hi-1`` whose blocks share one
state (references, hits, depth, and, when unreferenced, the time they were freed and their
place in the LRU order), so caching, referencing, freeing and evicting a prefix costs per
span, not per block. A request's own blocks (everything no other request can share) are
one ``OwnSpan`` per request. Each block keeps its own semantics: a span is split wherever
two of its blocks' states would differ.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

from schedkit.views import BlockSnapshot

if TYPE_CHECKING:
    from schedkit.facade import PolicyFacade
    from schedkit.views import EngineView

OWN_SHIFT = 24  # room for 16M own blocks per request in own block hashes


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` tokens (a ceiling division)."""
    return -(-tokens // block_size)


def group_key(hash_id: int) -> int:
    """A trace hash id as a group key >= 0 (zigzag), so that shared block hashes
    (``group * per + j``) never meet own block hashes (< 0)."""
    return 2 * hash_id if hash_id >= 0 else -2 * hash_id - 1


def own_block_hash(own_key: int, j: int) -> int:
    """A distinct negative hash for a request's j-th own block: the ``block_hash`` of its
    eviction candidate and an entry of the request's ``block_hashes``. Shared blocks'
    hashes are >= 0."""
    return own_key * (1 << OWN_SHIFT) - j


def own_key_of(block_hash: int) -> int:
    """The own key of the request whose own block has hash ``block_hash`` (< 0)."""
    return -(-block_hash >> OWN_SHIFT)


class Span:
    """Cached blocks ``lo..hi-1`` of group ``group`` in one state.

    ``refs`` requests reference each block; unreferenced (``refs == 0``) spans are
    evictable and listed in an LRU entry (``entry``), blocks ``hi-1`` first (a request
    frees its blocks tail first). ``views`` caches the eviction candidates' views of a
    free span, indexed by ``j - vbase``.
    """

    __slots__ = (
        "depth0",
        "entry",
        "group",
        "hi",
        "last_access",
        "lo",
        "num_hits",
        "rank",
        "refs",
        "serial",
        "ukey",
        "vbase",
        "views",
    )

    def __init__(self, group: int, lo: int, hi: int, refs: int, num_hits: int, depth0: int):
        self.group = group
        self.lo = lo
        self.hi = hi
        self.refs = refs
        self.num_hits = num_hits
        self.depth0 = depth0  # depth of block j is depth0 + j
        self.last_access = 0.0
        self.entry = 0  # key of its LRU entry while unreferenced
        self.views: list[BlockSnapshot] | None = None
        self.vbase = 0
        self.rank = (0, 0, 0)  # its place in the LRU order while free (evict_keys)
        self.serial = 0  # its live heap item (evict_keys; 0: none)
        self.ukey: tuple[Any, ...] | None = None  # the key of all its blocks, once known

    def upper(self, j: int) -> Span:
        """Cut at ``j``: this span keeps ``lo..j-1``, the returned one ``j..hi-1``."""
        top = Span(self.group, j, self.hi, self.refs, self.num_hits, self.depth0)
        top.last_access = self.last_access
        top.entry = self.entry
        top.views = self.views
        top.vbase = self.vbase
        top.rank = self.rank
        self.hi = j
        return top

    def __repr__(self) -> str:
        return f"Span({self.group}, {self.lo}..{self.hi}, refs={self.refs}, hits={self.num_hits})"


class OwnSpan:
    """The cached own blocks of one request: its first ``count`` own blocks."""

    __slots__ = (
        "count", "first_depth", "key", "last_access", "num_hits", "rank", "serial", "ukey",
    )  # fmt: skip

    def __init__(self, key: int, count: int, first_depth: int, clock: float) -> None:
        self.key = key
        self.count = count
        self.first_depth = first_depth
        self.last_access = clock
        self.num_hits = 0
        self.rank = (0, 0, 0)  # its place in the LRU order (evict_keys)
        self.serial = 0
        self.ukey: tuple[Any, ...] | None = None


class BlockTable:
    """One request's blocks, kept by the KV cache.

    ``nblocks`` in all: the first ``num_shared`` carry the trace's prefix hashes (groups
    ``groups``, ``per`` blocks each); ``refs`` lists, in block order, the ranges
    ``(group, lo, hi)`` of cached shared blocks it references (the others of its first
    ``num_shared`` are private copies); its remaining blocks are its own, of which the
    first ``own_cached`` are in the prefix cache.
    """

    __slots__ = ("groups", "key", "nblocks", "num_referenced", "num_shared", "own_cached", "refs")

    def __init__(self, key: int, groups: tuple[int, ...], num_shared: int) -> None:
        self.key = key  # own key (< 0): names its own blocks
        self.groups = groups
        self.num_shared = num_shared
        self.nblocks = 0
        self.refs: list[tuple[int, int, int]] = []
        self.num_referenced = 0
        self.own_cached = 0

    @property
    def private_blocks(self) -> int:
        """Blocks it holds that no cache entry accounts for."""
        return self.nblocks - self.num_referenced

    def clear(self) -> None:
        self.nblocks = self.num_referenced = self.own_cached = 0
        self.refs = []


def merge_spans(spans: list[Span]) -> None:
    """Join neighbouring referenced spans whose blocks are in one state."""
    i = 1
    while i < len(spans):
        a, b = spans[i - 1], spans[i]
        if (
            a.refs
            and a.hi == b.lo
            and a.refs == b.refs
            and a.num_hits == b.num_hits
            and a.depth0 == b.depth0
        ):
            a.hi = b.hi
            del spans[i]
        else:
            i += 1


def add_ref(refs: list[tuple[int, int, int]], g: int, lo: int, hi: int) -> None:
    """Append a referenced range to a block table, joining the last one if contiguous."""
    if refs:
        last = refs[-1]
        if last[0] == g and last[2] == lo:
            refs[-1] = (g, last[1], hi)
            return
    refs.append((g, lo, hi))


LruEntry = OwnSpan | list[Span]


class CacheState(Protocol):
    """What the eviction orders (``evict_keys``) read and change of the KV cache
    (``cache.KVCache``), which owns these records."""

    group_blocks: int
    cached_free: OrderedDict[int, LruEntry]
    cached_blocks: int
    _facade: PolicyFacade
    _engine: EngineView

    def _unlist(self, s: Span) -> None: ...
    def _drop(self, s: Span) -> None: ...
