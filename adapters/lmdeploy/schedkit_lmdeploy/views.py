"""schedkit views over LMDeploy's own objects: properties, never copies rebuilt per step.

One ``LmdeployRequestView`` per request (a turn of a ``SchedulerSequence``: LMDeploy
reuses a session's sequence for its next turn), one ``LmdeployEngineView`` per
``Scheduler``, and a ``BlockSnapshot`` per prefix-trie leaf that is an eviction
candidate (``NodeStates.view``). The adapter sets no attribute on LMDeploy's objects:
its bookkeeping lives in the views and in the runtime, keyed by sequence id or held
weakly by trie node. LMDeploy objects are typed ``Any``: the adapter does not
type-check against LMDeploy's internals, and the version check guards their shape.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from schedkit.adapter.metadata_view import MetadataView
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig
from schedkit.views import BlockSnapshot, RequestView

__all__ = [
    "LmdeployEngineView",
    "LmdeployRequestView",
    "NodeState",
    "NodeStates",
    "request_meta",
    "trie_blocks",
]

_now = time.perf_counter  # LMDeploy stamps arrivals and block accesses with it


def request_meta(seq: Any) -> Mapping[str, Any]:
    """The schedkit metadata a sequence carries: ``seq.meta``, which LMDeploy declares and
    never uses (``request_id``, ``tenant``, ``priority``, ``slo_ttft_ms``,
    ``slo_tpot_ms``); empty when it holds anything else."""
    meta = getattr(seq, "meta", None)
    return meta if isinstance(meta, Mapping) else {}


def trie_blocks(trie: Any) -> Iterator[Any]:
    """Every node of LMDeploy's prefix trie that holds a block (the roots hold none)."""
    stack = list(trie._roots.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if node.block_id >= 0:
            yield node


class NodeState:
    """What the adapter knows of one prefix-trie node: a schedkit id that is never reused
    (LMDeploy reuses block ids once a block is evicted), how many admitted requests hit
    it (LMDeploy keeps no count), and when it was last hit or released, in seconds on
    the engine clock (LMDeploy stamps whole perf_counter seconds)."""

    __slots__ = ("hits", "ident", "last_access")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.hits = 0
        self.last_access: float | None = None


class NodeStates:
    """``NodeState`` per trie node, held weakly: a node LMDeploy drops takes its state."""

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[Any, NodeState] = weakref.WeakKeyDictionary()
        self._ids = itertools.count(1)

    def of(self, node: Any) -> NodeState:
        state = self._states.get(node)
        if state is None:
            state = self._states[node] = NodeState(next(self._ids))
        return state

    def ident(self, node: Any) -> int:
        return self.of(node).ident

    def view(self, node: Any, block_size: int, fallback: Callable[[Any], float]) -> BlockSnapshot:
        """The ``BlockView`` of an evictable trie leaf. ``depth``: the block's index in its
        prompt (``prefix_len`` counts tokens up to and including the block).
        ``fallback(node)``: the last access of a node cached before schedkit saw it."""
        state = self.of(node)
        depth = max(0, int(node.prefix_len) // block_size - 1)
        when = fallback(node) if state.last_access is None else state.last_access
        return BlockSnapshot(state.ident, depth, when, state.hits)


class LmdeployRequestView(MetadataView):
    """A ``schedkit.RequestView`` over one turn of an LMDeploy ``SchedulerSequence``.

    Tenant, priority and SLO targets come from ``seq.meta`` (``request_meta``): LMDeploy's
    ``GenerationConfig`` has no priority or free-form field, so ``schedkit serve lmdeploy``
    puts the request's ``schedkit`` mapping there. All within ``trust``'s bounds
    (``TrustConfig.bound``; with ``seal``, metadata the edge did not seal is a client's
    claim: ``schedkit.adapter.metadata_view``). ``num_prompt_tokens`` is the turn's input
    as it arrived (history of earlier turns included: LMDeploy recomputes or reuses it as a
    prefix).
    """

    __slots__ = (
        "_arrival",
        "_claimed",
        "_node_id",
        "_output0",
        "_prompt",
        "_request_id",
        "_trie",
        "aborted",
        "finished",
        "num_preemptions",
        "rejected",
        "seq",
    )

    def __init__(
        self,
        seq: Any,
        arrival: float,
        trust: TrustConfig = DEFAULT_TRUST,
        trie: Any = None,
        node_id: Callable[[Any], int] | None = None,
        seal: Seal | None = None,
    ) -> None:
        self.seq = seq
        self._trie = trie  # for block_hashes, with node_id
        self._node_id = node_id
        # the adapter's bookkeeping of this turn (not for policies)
        self.finished = False
        self.rejected: str | None = None
        self.aborted = False
        meta = request_meta(seq)
        self._read_metadata(meta, trust, seal)
        self._claimed = meta.get("priority")  # LMDeploy has no priority field of its own
        self._request_id = str(meta.get("request_id") or f"session-{seq.session_id}")
        self._arrival = arrival
        self._prompt = int(seq.num_all_ids)
        self._output0 = int(seq.num_new_tokens)  # earlier turns' output, not this one's
        self.num_preemptions = 0

    @property
    def request_id(self) -> str:
        return self._request_id

    def _claimed_priority(self) -> object:
        return self._claimed

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
        0 after a preemption: LMDeploy does not count a recompute's match here, while the
        blocks it matched do count the hit, ``BlockView.num_hits``)."""
        return int(self.seq.cached_tokens)

    @property
    def block_hashes(self) -> tuple[int, ...]:
        """Ids of the trie nodes (``BlockView.block_hash``) that hold a prefix of the
        prompt now, root first: the blocks the request will reuse if they stay cached.
        Walked afresh on each read (the trie changes as blocks are cached and evicted)."""
        trie, node_id = self._trie, self._node_id
        if trie is None or node_id is None or not trie.enabled:
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

    __slots__ = (
        "_free_memo",
        "_now",
        "_scheduler",
        "block_size",
        "epoch",
        "kv_blocks_total",
        "step_index",
    )

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self._now: Callable[[], float] = _now
        self.epoch = _now()
        self.block_size: int = int(scheduler.cache_config.block_size)
        self.kv_blocks_total: int = int(scheduler.block_manager.num_gpu_blocks)
        self.step_index = 0
        self._free_memo: tuple[tuple[int, int, int], int] | None = None

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
        """Walks the trie once per step and free count (remembered: policies may read it
        for every request they look at)."""
        scheduler = self._scheduler
        free = int(scheduler.block_manager.get_num_free_gpu_blocks())
        trie = scheduler.block_trie
        if not trie.enabled:
            return free
        stamp = (self.step_index, free, scheduler.num_waiting())
        if self._free_memo is not None and self._free_memo[0] == stamp:
            return self._free_memo[1]
        allocator = scheduler.block_manager.allocator
        pinned = trie.state_checkpoints.is_pinned
        evictable = sum(
            1
            for node in trie_blocks(trie)
            if int(allocator.get_ref_count(node.block_id)) == 1 and not pinned(node)
        )
        self._free_memo = (stamp, free + evictable)
        return free + evictable

    @property
    def num_running(self) -> int:
        from lmdeploy.pytorch.messages import MessageStatus

        manager = self._scheduler.seq_manager
        running = manager.num_sequences(MessageStatus.RUNNING)
        return int(running + manager.num_sequences(MessageStatus.READY))

    @property
    def num_waiting(self) -> int:
        return int(self._scheduler.num_waiting())

    def cached_tokens(self, request: RequestView) -> int:
        """The prompt blocks LMDeploy's prefix trie holds now, as its match walks them
        (``LmdeployRequestView.block_hashes``: full blocks, the last token computed),
        times the block size; prompt blocks only (a preempted request's output is not
        matched)."""
        if not isinstance(request, LmdeployRequestView):
            return 0
        return len(request.block_hashes) * self.block_size
