"""schedkit views over LMDeploy's own objects: properties, never copies rebuilt per step.

One ``LmdeployRequestView`` per request (a turn of a ``SchedulerSequence``: LMDeploy
reuses a session's sequence for its next turn), one ``LmdeployEngineView`` per
``Scheduler``, and a ``BlockSnapshot`` per prefix-trie leaf that is an eviction
candidate (``node_view``). LMDeploy objects are typed ``Any``: the adapter does not
type-check against LMDeploy's internals, and the version check guards their shape.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

from schedkit.trust import DEFAULT_TRUST, TrustConfig
from schedkit.views import BlockSnapshot

__all__ = [
    "LmdeployEngineView",
    "LmdeployRequestView",
    "node_hits",
    "node_id",
    "node_view",
    "request_meta",
    "touch",
]

_now = time.perf_counter  # LMDeploy stamps arrivals and block accesses with it
_NODE_ID = "_schedkit_id"
_NODE_HITS = "_schedkit_hits"
_NODE_ACCESS = "_schedkit_access"  # engine-clock seconds of the last hit or release
_ids = itertools.count(1)


def request_meta(seq: Any) -> Mapping[str, Any]:
    """The schedkit metadata a sequence carries: ``seq.meta``, which LMDeploy declares and
    never uses (``request_id``, ``tenant``, ``priority``, ``slo_ttft_ms``,
    ``slo_tpot_ms``); empty when it holds anything else."""
    meta = getattr(seq, "meta", None)
    return meta if isinstance(meta, Mapping) else {}


def node_id(node: Any) -> int:
    """A trie node's schedkit id: stable for the node's life, never reused (LMDeploy's
    block ids are reused once a block is evicted)."""
    ident: int | None = getattr(node, _NODE_ID, None)
    if ident is None:
        ident = next(_ids)
        setattr(node, _NODE_ID, ident)
    return ident


def node_hits(node: Any) -> int:
    """How many admitted requests found ``node`` in the prefix cache (the adapter counts
    them: LMDeploy keeps no per-block count)."""
    return int(getattr(node, _NODE_HITS, 0))


def add_hit(node: Any) -> None:
    setattr(node, _NODE_HITS, node_hits(node) + 1)


def touch(node: Any, now: float) -> None:
    """``node`` was hit or released at ``now`` (seconds on the engine clock)."""
    setattr(node, _NODE_ACCESS, now)


def node_view(node: Any, block_size: int, fallback: Callable[[Any], float]) -> BlockSnapshot:
    """The ``BlockView`` of an evictable trie leaf. ``depth``: the block's index in its
    prompt (``prefix_len`` counts tokens up to and including the block). ``last_access``:
    when the adapter saw it hit or released, on the engine clock; ``fallback(node)`` for
    a node cached before schedkit was installed."""
    depth = max(0, int(node.prefix_len) // block_size - 1)
    when = getattr(node, _NODE_ACCESS, None)
    last_access = fallback(node) if when is None else float(when)
    return BlockSnapshot(node_id(node), depth, last_access, node_hits(node))


class LmdeployRequestView:
    """A ``schedkit.RequestView`` over one turn of an LMDeploy ``SchedulerSequence``.

    Tenant, priority and SLO targets come from ``seq.meta`` (``request_meta``): LMDeploy's
    ``GenerationConfig`` has no priority or free-form field, so ``schedkit serve lmdeploy``
    puts the request's ``schedkit`` mapping there. All within ``trust``'s bounds
    (``TrustConfig.bound``). ``num_prompt_tokens`` is the turn's input as it arrived
    (history of earlier turns included: LMDeploy recomputes or reuses it as a prefix).
    """

    __slots__ = (
        "_arrival",
        "_output0",
        "_priority",
        "_prompt",
        "_request_id",
        "_slo_tpot_ms",
        "_slo_ttft_ms",
        "_tenant",
        "num_preemptions",
        "seq",
    )

    def __init__(self, seq: Any, arrival: float, trust: TrustConfig = DEFAULT_TRUST) -> None:
        self.seq = seq
        meta = request_meta(seq)
        bounded = trust.bound(meta, meta.get("priority"))
        self._tenant: str = bounded.tenant
        self._priority: int = bounded.priority
        self._slo_ttft_ms: float | None = bounded.slo_ttft_ms
        self._slo_tpot_ms: float | None = bounded.slo_tpot_ms
        self._request_id = str(meta.get("request_id") or f"session-{seq.session_id}")
        self._arrival = arrival
        self._prompt = int(seq.num_all_ids)
        self._output0 = int(seq.num_new_tokens)  # earlier turns' output, not this one's
        self.num_preemptions = 0

    @property
    def request_id(self) -> str:
        return self._request_id

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def slo_ttft_ms(self) -> float | None:
        return self._slo_ttft_ms

    @property
    def slo_tpot_ms(self) -> float | None:
        return self._slo_tpot_ms

    @property
    def arrival_time(self) -> float:
        return self._arrival

    @property
    def num_prompt_tokens(self) -> int:
        return self._prompt

    @property
    def num_computed_tokens(self) -> int:
        return int(self.seq.num_history_ids)

    @property
    def num_output_tokens(self) -> int:
        return int(self.seq.num_new_tokens) - self._output0

    @property
    def max_tokens(self) -> int:
        return int(self.seq.sampling_param.max_new_tokens)

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens LMDeploy found in its prefix cache at admission (``cached_tokens``;
        0 after a preemption, whose recompute LMDeploy does not count as a hit)."""
        return int(self.seq.cached_tokens)

    @property
    def block_hashes(self) -> tuple[int, ...]:
        """Ids of the trie nodes (``BlockView.block_hash``) that hold a prefix of the
        prompt now, root first: the blocks the request will reuse if they stay cached.
        Walked afresh on each read (the trie changes as blocks are cached and evicted)."""
        trie = getattr(self.seq, "_schedkit_trie", None)
        if trie is None or not trie.enabled:
            return ()
        node = trie._roots.get(self.seq.adapter_name)
        ids: list[int] = []
        size = trie.block_size
        tokens = self.seq.history_cache
        end = size
        while node is not None and end < self._prompt:  # as LMDeploy: the last token is computed
            block = tokens[end - size : end]
            identity = self.seq.get_prefix_cache_extra_identity(end - size, end)
            child = node.children.get(trie._hash_block(block, identity))
            if child is None or not trie._node_matches_block(child, block, identity):
                break
            ids.append(node_id(child))
            node, end = child, end + size
        return tuple(ids)

    def __repr__(self) -> str:
        return f"LmdeployRequestView({self.request_id!r}, tenant={self.tenant!r})"


class LmdeployEngineView:
    """A ``schedkit.EngineView`` over an LMDeploy ``Scheduler``; one for the engine's life.

    ``clock`` is seconds since the view was made on ``time.perf_counter`` (the clock
    LMDeploy stamps arrivals with), unless a driver brings its own (``use_clock``).
    ``kv_blocks_free`` counts free GPU blocks plus the trie's cached blocks that no
    sequence holds (evictable); ``num_running`` counts READY and RUNNING sequences (a
    prefill batch is READY until dispatched), ``num_waiting`` WAITING ones.
    """

    __slots__ = ("_now", "_scheduler", "block_size", "epoch", "kv_blocks_total", "step_index")

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self._now: Callable[[], float] = _now
        self.epoch = _now()
        self.block_size: int = int(scheduler.cache_config.block_size)
        self.kv_blocks_total: int = int(scheduler.block_manager.num_gpu_blocks)
        self.step_index = 0

    def use_clock(self, now: Callable[[], float], epoch: float = 0.0) -> None:
        """Read the clock from ``now`` from here on (before any request arrives): a
        driver with its own clock passes it (the contract suite's step clock)."""
        self._now, self.epoch = now, epoch

    @property
    def clock(self) -> float:
        return self._now() - self.epoch

    def since_epoch(self, perf_counter_s: float) -> float:
        """A ``time.perf_counter`` stamp of LMDeploy's, in seconds on ``clock``."""
        return perf_counter_s - self.epoch if self._now is _now else self.clock

    @property
    def kv_blocks_free(self) -> int:
        scheduler = self._scheduler
        free = int(scheduler.block_manager.get_num_free_gpu_blocks())
        trie = scheduler.block_trie
        if not trie.enabled:
            return free
        allocator = scheduler.block_manager.allocator
        stack = list(trie._roots.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.block_id >= 0 and int(allocator.get_ref_count(node.block_id)) == 1:
                free += 1
        return free

    @property
    def num_running(self) -> int:
        from lmdeploy.pytorch.messages import MessageStatus

        manager = self._scheduler.seq_manager
        running = manager.num_sequences(MessageStatus.RUNNING)
        return int(running + manager.num_sequences(MessageStatus.READY))

    @property
    def num_waiting(self) -> int:
        return int(self._scheduler.num_waiting())
