"""A request inside the simulated engine: the policy-facing view plus engine state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from schedkit.bench.records import RequestRecord
from schedkit.sim.kvcache import own_block_hash
from schedkit.views import RequestState

if TYPE_CHECKING:
    from schedkit.sim.kvcache import KVCache

_UNIQUE_SHIFT = 24  # room for 16M blocks per request in unique block hashes


class TraceLike(Protocol):
    """What the engine needs of a trace request (``schedkit.sim.workloads.TraceRequest``)."""

    @property
    def request_id(self) -> str: ...
    @property
    def arrival_s(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def tenant(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def slo_ttft_ms(self) -> float | None: ...
    @property
    def slo_tpot_ms(self) -> float | None: ...
    @property
    def hash_ids(self) -> tuple[int, ...]: ...


class SimRequest(RequestState):
    """``RequestState`` plus what the simulator tracks; policies see only the view.

    Its blocks are ``nblocks`` in all: the first ``num_shared`` carry the trace's prefix
    hashes and are listed in ``shared`` (hash when cached, None when private); the rest
    are its own, of which the first ``own_cached`` are in the prefix cache.

    ``block_hashes`` (the view's) is set by the engine from ``hash_blocks`` when the
    request arrives and when it is preempted, and emptied when it leaves.
    """

    __slots__ = (
        "hash_ids",
        "hashes",
        "index",
        "last_token_s",
        "lost_tokens",
        "nblocks",
        "num_shared",
        "num_tokens",
        "own_cached",
        "per_hash",
        "record",
        "shared",
    )

    def __init__(
        self,
        index: int,
        record: RequestRecord,
        hash_ids: tuple[int, ...],
        per_hash: int,
        block_size: int,
    ) -> None:
        super().__init__(
            record.request_id,
            record.prompt_tokens,
            record.max_tokens,
            arrival_time=record.arrival_s,
            tenant=record.tenant,
            priority=record.priority,
            slo_ttft_ms=record.slo_ttft_ms,
            slo_tpot_ms=record.slo_tpot_ms,
        )
        self.index = index
        self.record = record
        self.num_tokens = record.prompt_tokens  # prompt + generated so far
        self.hash_ids = hash_ids
        self.hashes: tuple[int, ...] | None = None  # shared block hashes, built on first use
        self.per_hash = per_hash  # engine blocks per trace hash id; 0 = nothing shared
        self.num_shared = min(len(hash_ids) * per_hash, record.prompt_tokens // block_size)
        self.nblocks = 0
        self.shared: list[int | None] = []
        self.own_cached = 0
        self.lost_tokens = 0  # computed tokens thrown away by the last preemption
        self.last_token_s = 0.0

    @classmethod
    def from_trace(
        cls, index: int, trace: TraceLike, block_size: int, hash_block_tokens: int
    ) -> SimRequest:
        record = RequestRecord(
            request_id=trace.request_id,
            tenant=trace.tenant,
            priority=trace.priority,
            arrival_s=trace.arrival_s,
            prompt_tokens=max(1, trace.prompt_tokens),
            max_tokens=max(1, trace.output_tokens),
            slo_ttft_ms=trace.slo_ttft_ms,
            slo_tpot_ms=trace.slo_tpot_ms,
        )
        shared = hash_block_tokens > 0 and hash_block_tokens % block_size == 0 and trace.hash_ids
        per_hash = hash_block_tokens // block_size if shared else 0
        return cls(index, record, trace.hash_ids if shared else (), per_hash, block_size)

    @property
    def run_key(self) -> int:
        return -(self.index + 1)

    @property
    def private_blocks(self) -> int:
        """Blocks it holds that no cache entry accounts for."""
        return self.nblocks - sum(1 for h in self.shared if h is not None)

    def shared_hashes(self) -> tuple[int, ...]:
        """Hashes of its ``num_shared`` blocks: trace hash id and block within it."""
        if self.hashes is None:
            per, ids = self.per_hash, self.hash_ids
            # Zigzag-encode ids so shared hashes are >= 0 and never meet own-run keys (< 0).
            self.hashes = tuple(
                (2 * ids[i // per] if ids[i // per] >= 0 else -2 * ids[i // per] - 1) * per
                + i % per
                for i in range(self.num_shared)
            )
        return self.hashes

    def hash_blocks(self, block_size: int) -> tuple[int, ...]:
        """Hashes of its full blocks so far, as the prefix cache names them: the shared
        blocks' (trace hash ids), then its own (``own_block_hash``), which only it can hit
        again, after a preemption. Output blocks count once generated, as in vLLM."""
        shared = self.shared_hashes() if self.num_shared else ()
        num_own = self.num_tokens // block_size - self.num_shared
        if num_own <= 0:
            return shared
        key = self.run_key
        return shared + tuple(own_block_hash(key, j) for j in range(num_own))

    def cached_prefix(self, kv: KVCache) -> tuple[tuple[int, ...], int]:
        """Leading blocks found in the prefix cache: shared hashes, then own blocks.

        At most ``num_tokens - 1`` tokens are hits, as in vLLM: the last is recomputed.
        """
        if not kv.prefix_caching:
            return (), 0
        limit = (self.num_tokens - 1) // kv.block_size
        meta, n = kv.meta, min(limit, self.num_shared)
        hashes = self.shared_hashes() if n else ()
        for i in range(n):
            if hashes[i] not in meta:
                return hashes[:i], 0
        hit = hashes[:n]
        own = (
            min(kv.run_hit(self.run_key), limit - self.num_shared) if limit > self.num_shared else 0
        )
        return hit, own

    def add_blocks(self, n: int) -> None:
        room = self.num_shared - len(self.shared)
        if room > 0:
            self.shared.extend([None] * min(n, room))
        self.nblocks += n

    def publish_blocks(self, kv: KVCache, first: int, end: int, clock: float) -> None:
        """Put blocks ``first..end-1``, now full and computed, into the prefix cache."""
        shared = self.shared
        if first < self.num_shared:
            hashes = self.shared_hashes()
            for i in range(first, min(end, self.num_shared)):
                if shared[i] is None and kv.cache_block(hashes[i], i, clock):
                    shared[i] = hashes[i]
        if (
            end > self.num_shared
            and max(first, self.num_shared) - self.num_shared == self.own_cached
        ):
            self.own_cached = end - self.num_shared

    def release(self, kv: KVCache, clock: float) -> None:
        """Free all its blocks (finished or preempted)."""
        private = self.nblocks - len(self.shared) - self.own_cached
        kv.free(self.shared, private, self.run_key, self.own_cached, self.num_shared, clock)
        self.nblocks = 0
        self.shared = []
        self.own_cached = 0
