"""KV offload tier: let ``select_evictions`` / ``eviction_key`` choose which offloaded
chunks vLLM's CPU tier drops.

vLLM's ``OffloadingConnector`` keeps KV chunks in host memory, managed on the scheduler
side by a ``CPUOffloadingManager`` whose replacement decisions come from a ``CachePolicy``
named in the connector's extra config. ``SchedkitCachePolicy`` is one, loaded by vLLM
itself (no patch)::

    "kv_connector_extra_config": {"cpu_bytes_to_use": N,
        "eviction_policy": "SchedkitCachePolicy",
        "cache_policy_module_path": "schedkit_vllm.offload"}

It is vLLM's ``LRUCachePolicy`` (its bookkeeping, its order) whose ``evict`` asks the
policies of the schedkit scheduler that built it, with the GPU tier's meaning
(``schedkit_vllm.eviction``): the candidates are the evictable (no transfer reading
them), unprotected chunks, least recently used first, at most ``max(4096, 4 * n)`` for
``n`` chunks to evict; each is a ``BlockView`` (``OffloadChunkView``). The policies'
answer decides; ``None`` (no eviction hook, no opinion, a failing policy) is vLLM's LRU,
exactly. ``evict``'s contract holds either way: exactly ``n`` chunks, or ``None`` and
nothing changed.

Cost: nothing without an eviction hook; with one, per eviction, the window's entries
popped from vLLM's LRU heap and pushed back, and the facade's call on the candidates.

The policy object is the scheduler's own (policies hold state): vLLM builds the manager,
and with it this policy, inside the scheduler's constructor, with no config at hand
(``vllm.config.get_current_vllm_config()`` is unset there, in the engine-core process
and in the model-less harness alike). So the schedkit scheduler opens ``collecting()``
around its vLLM constructor; each ``SchedkitCachePolicy`` built inside joins it and is
bound to the scheduler's facade and engine view when the policies are installed. Built
anywhere else (vLLM's own scheduler class), it raises at once; built by a schedkit
scheduler that has no schedkit config, the scheduler raises (``require_config``): both
at engine start, never at the first eviction.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

import vllm
from schedkit import EngineView, PolicyFacade
from schedkit.errors import PolicyConfigError
from schedkit.views import BlockSnapshot

from schedkit_vllm.compat import check_version

check_version(vllm.__version__)

from vllm.v1.kv_offload.base import get_offload_block_hash  # noqa: E402
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy  # noqa: E402

from schedkit_vllm.config import ENV_VAR, KEY  # noqa: E402
from schedkit_vllm.eviction import EVICTION_WINDOW, EVICTION_WINDOW_PER_BLOCK  # noqa: E402
from schedkit_vllm.views import hash_int  # noqa: E402

if TYPE_CHECKING:
    _LRUBase = Any
else:
    _LRUBase = LRUCachePolicy

__all__ = [
    "OffloadChunkView",
    "SchedkitCachePolicy",
    "collecting",
    "require_config",
]

NAME = "SchedkitCachePolicy"
MODULE = "schedkit_vllm.offload"
_SELECTED = f"eviction_policy {NAME!r} (cache_policy_module_path {MODULE!r})"
_OR_LRU = "or set the connector's eviction_policy to 'lru' for vLLM's own LRU"

# The policies built while a schedkit scheduler's vLLM constructor runs (``collecting``).
_building: ContextVar[list[SchedkitCachePolicy] | None] = ContextVar(
    "schedkit_offload_building", default=None
)


@contextmanager
def collecting() -> Iterator[list[SchedkitCachePolicy]]:
    """The ``SchedkitCachePolicy`` objects built inside the block, in a list filled as
    they are made; outside such a block, building one raises."""
    built: list[SchedkitCachePolicy] = []
    token = _building.set(built)
    try:
        yield built
    finally:
        _building.reset(token)


def require_config(policies: Sequence[SchedkitCachePolicy]) -> None:
    """Raise when a scheduler with no schedkit config built the offload tier's
    ``SchedkitCachePolicy``: it would have no policy to ask."""
    if policies:
        raise PolicyConfigError(
            f"vLLM's KV offload tier uses {_SELECTED}, which asks the scheduler's schedkit"
            " policies, but no schedkit config is set: pass --additional-config"
            f' \'{{"{KEY}": {{"policy": ["NAME"]}}}}\' (or set {ENV_VAR}=/path/schedkit.toml;'
            " `schedkit serve vllm --policy NAME` does this), " + _OR_LRU
        )


class OffloadChunkView(BlockSnapshot):
    """A ``schedkit.BlockView`` over one offloaded chunk, kept while it is in the tier.

    ``block_hash``: the chunk's key without its KV group (vLLM keys a chunk by the hash
    of its last block), cut to 8 bytes as on the GPU tier, so it equals
    ``RequestView.block_hashes[depth]`` of a request holding the chunk. ``depth``: that
    index, from the end-token position vLLM's scheduler records for the key
    (``ReqContext.get_offload_key_position``; 0 until a request gives one).
    ``last_access``: the engine clock when the chunk was stored or a request last used
    it. ``num_hits``: the requests that reused it (vLLM's ``reused_keys``: loaded from
    the tier, or offered again while resident), each counted once.
    """

    __slots__ = ("key", "placed")

    def __init__(self, key: Any, now: float) -> None:
        super().__init__(hash_int(get_offload_block_hash(key)), 0, now)
        self.key = key
        self.placed = False

    def place(self, position: int, hash_block_size: int) -> None:
        """vLLM's end-token position of the chunk in a request's prefix."""
        self._depth = max(0, position // hash_block_size - 1)
        self.placed = True

    def accessed(self, now: float) -> None:
        self._last_access = now

    def reused(self) -> None:
        self._num_hits += 1

    def __repr__(self) -> str:
        return f"OffloadChunkView(depth={self.depth}, num_hits={self.num_hits})"


class SchedkitCachePolicy(_LRUBase):  # type: ignore[misc]
    """vLLM's LRU ``CachePolicy`` whose evictions the schedkit policies choose."""

    def __init__(self, cache_capacity: int) -> None:
        built = _building.get()
        if built is None:
            raise PolicyConfigError(
                f"vLLM's KV offload tier uses {_SELECTED}, which asks the scheduler's"
                " schedkit policies, but the scheduler is not schedkit's: start vLLM with"
                " --scheduler-cls schedkit_vllm.AsyncScheduler (schedkit_vllm.Scheduler"
                " where async scheduling is off) and a schedkit config, or through"
                " `schedkit serve vllm --policy NAME`, " + _OR_LRU
            )
        super().__init__(cache_capacity)
        built.append(self)
        self.views: dict[Any, OffloadChunkView] = {}  # offload key -> its record
        self.facade: PolicyFacade | None = None  # set by bind(); None: LRU
        self.engine: EngineView | None = None
        self.hash_block_size = 0
        self.eviction_window = EVICTION_WINDOW  # 0: every evictable chunk is a candidate
        self.num_evicted_by_policy = 0
        self._clock: Callable[[], float] = lambda: 0.0
        self._timed: Callable[[str, float, bool], None] | None = None

    def bind(
        self,
        facade: PolicyFacade,
        engine: EngineView,
        *,
        hash_block_size: int,
        timed: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        """Ask ``facade`` from now on, with ``engine``'s clock and state; positions are
        in tokens of ``hash_block_size`` (the scheduler's block hashing). ``timed``
        (the runtime's) counts each call in the metrics."""
        self.facade = facade
        self.engine = engine
        self.hash_block_size = int(hash_block_size)
        self._clock = lambda: engine.clock
        self._timed = timed

    # -- records: what vLLM's LRU does not keep ---------------------------------------

    def _seen(self, keys: Iterable[Any], req_context: Any, now: float) -> None:
        views = self.views
        for key in keys:
            view = views.get(key)
            if view is None:  # not resident (an access may precede the store)
                continue
            view.accessed(now)
            if not view.placed and self.hash_block_size:
                position = req_context.get_offload_key_position(key)
                if position is not None:
                    view.place(int(position), self.hash_block_size)

    def insert(self, key: Any, chunk: Any, *req_context: Any) -> None:
        # vLLM 0.33+ passes the storing request's context; 0.32 does not.
        super().insert(key, chunk, *req_context)
        now = self._clock()
        self.views[key] = OffloadChunkView(key, now)
        if req_context:
            self._seen((key,), req_context[0], now)

    def remove(self, key: Any) -> None:
        super().remove(key)
        self.views.pop(key, None)

    def clear(self) -> None:
        super().clear()
        self.views.clear()

    if hasattr(LRUCachePolicy, "on_request_access"):  # vLLM 0.33+

        def on_request_access(self, keys: Iterable[Any], req_context: Any) -> None:
            keys = list(keys)
            super().on_request_access(keys, req_context)
            self._seen(keys, req_context, self._clock())

    if hasattr(LRUCachePolicy, "touch"):  # vLLM 0.32, 0.33

        def touch(self, keys: Iterable[Any], req_context: Any) -> None:
            keys = list(keys)
            super().touch(keys, req_context)
            self._seen(keys, req_context, self._clock())

    def on_request_finished(
        self,
        key_groups: Sequence[Sequence[Any]],
        insertion_only_keys: set[Any],
        reused_keys: set[Any],
        req_context: Any,
    ) -> None:
        super().on_request_finished(key_groups, insertion_only_keys, reused_keys, req_context)
        now = self._clock()
        for keys in key_groups:
            self._seen(keys, req_context, now)
        views = self.views
        for key in reused_keys:
            view = views.get(key)
            if view is not None:
                view.reused()

    # -- eviction -----------------------------------------------------------------------

    def evict(self, n: int, protected: set[Any]) -> list[tuple[Any, Any]] | None:
        """Exactly ``n`` evictable, unprotected chunks, removed, or ``None`` (nothing
        changed) when there are fewer: the policies' choice, else vLLM's LRU."""
        chosen = self._choose(n, protected)
        if chosen is None:
            evicted: list[tuple[Any, Any]] | None = super().evict(n, protected)
        else:
            evicted = self._drop(chosen)
        views = self.views
        for key, _ in evicted or ():
            views.pop(key, None)
        return evicted

    def _choose(self, n: int, protected: set[Any]) -> list[Any] | None:
        """The keys the policies evict, or None for LRU (no hook, no answer, or fewer
        than ``n`` candidates, where LRU fails too)."""
        facade = self.facade
        if n <= 0 or facade is None or not facade.has_evictions:
            return None
        window = self.eviction_window
        limit = max(window, EVICTION_WINDOW_PER_BLOCK * n) if window else -1
        keys = self._least_recent(limit, protected)
        if len(keys) < n:
            return None
        views = self.views
        candidates = [views.get(key) or self._record(key) for key in keys]
        started = time.perf_counter()
        picked = facade.select_evictions(candidates, n, cast(EngineView, self.engine))
        if self._timed is not None:
            self._timed("select_evictions", started, picked is not None)
        if picked is None:
            return None
        return [cast(OffloadChunkView, view).key for view in picked[:n]]

    def _record(self, key: Any) -> OffloadChunkView:
        view = self.views[key] = OffloadChunkView(key, self._clock())
        return view

    def _least_recent(self, limit: int, protected: set[Any]) -> list[Any]:
        """Up to ``limit`` (-1: all) evictable, unprotected keys in the order vLLM's LRU
        evicts them: its heap's current entries, popped and pushed back (stale and
        duplicate entries are dropped, as its own ``evict`` drops them)."""
        heap = self._heap
        popped: list[Any] = []
        keys: list[Any] = []
        seen: set[Any] = set()
        while heap and len(keys) != limit:
            entry = heapq.heappop(heap)
            key = entry[1]
            if key in seen or not self._is_current(entry):
                continue
            seen.add(key)
            popped.append(entry)
            if key not in protected:
                keys.append(key)
        for entry in popped:
            heapq.heappush(heap, entry)
        return keys

    def _drop(self, keys: list[Any]) -> list[tuple[Any, Any]]:
        """Remove ``keys`` (evictable, distinct) as vLLM's LRU removes what it evicts."""
        evicted = []
        for key in keys:
            self._evictable.remove(key)
            chunk = self.chunks.pop(key)
            del self._ranks[key]
            evicted.append((key, chunk))
        self._maybe_compact_heap()
        self.num_evicted_by_policy += len(evicted)
        return evicted
