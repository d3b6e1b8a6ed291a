"""schedkit views over vLLM's own objects: properties, never copies rebuilt per step.

One ``VllmRequestView`` per request (cached by the runtime for the request's life), one
``VllmEngineView`` per scheduler, one ``VllmBlockView`` per cached block that is an
eviction candidate. vLLM objects are typed ``Any``: the adapter does not type-check
against vLLM's internals, and the version check guards their shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from schedkit.adapter.metadata_view import MetadataView
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig
from schedkit.views import BlockSnapshot, RequestView

# vLLM stamps Request.arrival_time with time.time(); the engine clock uses the same
# source so that ``engine.clock - request.arrival_time`` is a wait in seconds.
_now = time.time


def hash_int(key: Any) -> int:
    """vLLM's block hash (a digest in bytes; for a cached block the digest plus its KV
    group id) as a stable int: its first 8 bytes, big-endian. A request's hashes and its
    cached blocks' hashes map alike, so policies can match them."""
    return int.from_bytes(bytes(key)[:8], "big")


class VllmRequestView(MetadataView):
    """A ``schedkit.RequestView`` over a ``vllm.v1.request.Request``.

    Tenant and SLO targets come from the request's ``vllm_xargs``
    (``sampling_params.extra_args``): keys ``tenant``, ``slo_ttft_ms``, ``slo_tpot_ms``;
    priority from vLLM's own field. All within ``trust``'s bounds (``TrustConfig.bound``:
    the defence in depth for requests that did not pass the HTTP edge); with ``seal`` (the
    server's edge key), metadata the edge did not seal is a client's claim
    (``schedkit.adapter.metadata_view``).
    """

    __slots__ = ("_epoch", "_hashed", "_hashes", "_num_cached_tokens", "request")

    def __init__(
        self,
        request: Any,
        epoch: float,
        trust: TrustConfig = DEFAULT_TRUST,
        seal: Seal | None = None,
    ) -> None:
        self.request = request
        self._epoch = epoch
        params = getattr(request, "sampling_params", None)
        self._read_metadata(getattr(params, "extra_args", None), trust, seal)
        # Set by the runtime when vLLM admits the request (prefix-cache hit size).
        self._num_cached_tokens: int = 0
        self._hashes: list[int] = []  # request.block_hashes converted so far
        self._hashed: object = None  # the last digest converted, to notice a rewrite

    # Read-only for policies, as every view: the runtime records admission below.
    @property
    def num_cached_tokens(self) -> int:
        return self._num_cached_tokens

    def admitted(self, cached_tokens: int) -> None:
        """vLLM admitted the request with ``cached_tokens`` from the prefix cache."""
        self._num_cached_tokens = cached_tokens

    @property
    def request_id(self) -> str:
        return str(self.request.request_id)

    def _claimed_priority(self) -> object:
        return self.request.priority

    @property
    def arrival_time(self) -> float:
        return float(self.request.arrival_time) - self._epoch

    @property
    def num_prompt_tokens(self) -> int:
        return int(self.request.num_prompt_tokens)

    @property
    def num_computed_tokens(self) -> int:
        return int(self.request.num_computed_tokens)

    @property
    def num_output_tokens(self) -> int:
        return int(self.request.num_output_tokens)

    @property
    def max_tokens(self) -> int:
        return int(self.request.max_tokens)

    @property
    def num_preemptions(self) -> int:
        return int(self.request.num_preemptions)

    @property
    def block_hashes(self) -> Sequence[int]:
        """``request.block_hashes`` (prompt and output blocks, appended by vLLM as they
        fill) as ints, each digest converted once for the request's life."""
        raw = self.request.block_hashes
        done = self._hashes
        n = len(done)
        if len(raw) < n or (n and raw[n - 1] is not self._hashed):
            # vLLM rewrote the list (a streaming session truncates it): start over.
            done = self._hashes = []
            n = 0
        if len(raw) > n:
            done.extend(hash_int(key) for key in raw[n:])
            self._hashed = raw[-1]
        return done

    def __repr__(self) -> str:
        return f"VllmRequestView({self.request_id!r}, tenant={self.tenant!r})"


class VllmEngineView:
    """A ``schedkit.EngineView`` over a vLLM scheduler; one object for the engine's life.

    ``clock`` is seconds since the view was made, read from ``now`` (default
    ``time.time``, the source vLLM stamps ``Request.arrival_time`` with) so that
    ``clock - request.arrival_time`` is a wait in seconds. A driver with its own clock
    (the twin engine's simulated time, with arrival times on it) passes ``now`` and
    ``epoch=0.0``.
    """

    __slots__ = (
        "_now",
        "_pool",
        "_scheduler",
        "block_size",
        "epoch",
        "kv_blocks_total",
        "step_index",
    )

    def __init__(
        self, scheduler: Any, now: Callable[[], float] = _now, epoch: float | None = None
    ) -> None:
        self._scheduler = scheduler
        self._pool = scheduler.kv_cache_manager.block_pool
        self._now = now
        self.epoch = now() if epoch is None else epoch
        self.block_size: int = int(scheduler.block_size)
        # Block 0 is vLLM's null block and never allocatable.
        self.kv_blocks_total: int = int(self._pool.num_gpu_blocks) - 1
        self.step_index = 0

    def use_clock(self, now: Callable[[], float], epoch: float = 0.0) -> None:
        """Read the clock from ``now`` from here on (before any request arrives)."""
        self._now = now
        self.epoch = epoch

    @property
    def clock(self) -> float:
        return self._now() - self.epoch

    @property
    def kv_blocks_free(self) -> int:
        return int(self._pool.get_num_free_blocks())

    @property
    def num_running(self) -> int:
        return len(self._scheduler.running)

    @property
    def num_waiting(self) -> int:
        # vLLM's own count of every waiting queue: waiting and kv_holding_waiting, plus
        # async_kv_waiting (remote KV loads not yet started) since 0.34.
        return int(self._scheduler.get_request_counts()[1])

    def cached_tokens(self, request: RequestView) -> int:
        """The prefix-cache hit admission would find now: the lookup
        ``KVCacheManager.get_computed_blocks`` makes (the coordinator's longest hit over
        the request's block hashes, at most ``num_tokens - 1``), without its side
        effects (prefix-cache stats, KV events)."""
        if not isinstance(request, VllmRequestView):
            return 0
        req = request.request
        manager = self._scheduler.kv_cache_manager
        if not manager.enable_caching or getattr(req, "skip_reading_prefix_cache", False):
            return 0
        hit = manager.coordinator.find_longest_cache_hit(req.block_hashes, req.num_tokens - 1)
        return int(hit[1])  # (blocks per group, hit length[, 0.32+: uncached shared prefix])


class VllmBlockView(BlockSnapshot):
    """A ``schedkit.BlockView`` over a cached, unreferenced ``KVCacheBlock``.

    vLLM keeps no access times or hit counts per block; the eviction hook records them
    (when the block is freed or hit) in this record, kept while the block stays cached.
    """

    __slots__ = ("block",)

    def __init__(self, block: Any, hash_block_size: int, last_access: float = 0.0) -> None:
        self.block = block
        key = block.block_hash
        # vLLM's key is a digest (bytes) plus the KV group id; its first 8 bytes make a
        # stable int for policies that remember blocks between calls.
        num_tokens = block.block_hash_num_tokens
        super().__init__(
            hash_int(key) if key is not None else 0,
            max(0, -(-int(num_tokens) // hash_block_size) - 1) if num_tokens else 0,
            last_access,
        )

    # Read-only for policies (BlockSnapshot); the eviction hook records frees and hits.
    def freed(self, now: float) -> None:
        self._last_access = now

    def hit(self, now: float) -> None:
        self._num_hits += 1
        self._last_access = now

    def __repr__(self) -> str:
        return f"VllmBlockView(block_id={self.block.block_id}, depth={self.depth})"
