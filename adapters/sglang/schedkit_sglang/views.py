"""schedkit views over SGLang's own objects: properties, never copies rebuilt per step.

One ``SglangRequestView`` per request (cached by the runtime for the request's life), one
``SglangEngineView`` per scheduler, and one ``SglangNodeView`` per radix-tree leaf that is
an eviction candidate. SGLang objects are typed ``Any``: the adapter does not type-check
against SGLang's internals, and the version check guards their shape.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from schedkit.adapter.metadata_view import MetadataView
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig
from schedkit.views import BlockSnapshot, RequestView

# SGLang stamps request times with time.perf_counter() (rebased across its processes).
_now = time.perf_counter


def unset_priority(scheduler: Any) -> int:
    """The priority of a request that came without one, as SGLang's scheduler resolves it.

    Without ``--enable-priority-scheduling`` SGLang ignores priorities: schedkit's default,
    0 (as on vLLM and the simulator). With it, SGLang gives such a request
    ``--default-priority-value`` (``TokenizerManager._set_default_priority``), or, when that
    is unset, the value it schedules after every other (``Scheduler._set_or_validate_priority``:
    ``sys.maxsize`` with ``--schedule-low-priority-values-first``, ``-sys.maxsize - 1``
    without). Reporting SGLang's value keeps a request's priority the same before and after
    SGLang's queue entry, and keeps policies and SGLang's preemption threshold on one scale.
    """
    if not getattr(scheduler, "enable_priority_scheduling", False):
        return 0
    default = getattr(getattr(scheduler, "server_args", None), "default_priority_value", None)
    if default is not None:
        return int(default)
    return sys.maxsize if scheduler.schedule_low_priority_values_first else -sys.maxsize - 1


def _arrival(req: Any) -> float:
    stats = req.time_stats
    for name in ("created_time", "scheduler_recv_time", "wait_queue_entry_time"):
        value = float(getattr(stats, name, 0.0) or 0.0)
        if value > 0.0:
            return value
    return _now()


class SglangRequestView(MetadataView):
    """A ``schedkit.RequestView`` over an SGLang ``Req``.

    Tenant and SLO targets come from the request's ``sampling_params.custom_params``
    (keys ``tenant``, ``slo_ttft_ms``, ``slo_tpot_ms``; ``schedkit.adapter.parse_metadata``:
    an SLO that is not a finite positive number counts as absent). Priority is SGLang's
    own ``priority`` field; a request without one has ``unset_priority`` (the
    scheduler's ``unset_priority()``: 0 unless SGLang's priority scheduling gives it
    another value). All within ``trust``'s bounds (``TrustConfig.bound``: the defence in
    depth for requests that did not pass the HTTP edge; with ``seal``, metadata the edge
    did not seal is a client's claim: ``schedkit.adapter.metadata_view``); the unset value
    is SGLang's own and is not clamped.
    """

    __slots__ = ("_arrival", "_nodes", "_unset", "req")

    def __init__(
        self,
        req: Any,
        epoch: float,
        nodes: Callable[[int], Any] | None = None,
        unset_priority: int = 0,
        arrival: float | None = None,
        trust: TrustConfig = DEFAULT_TRUST,
        seal: Seal | None = None,
    ) -> None:
        self.req = req
        self._unset = unset_priority
        self._nodes = nodes  # the radix tree's node by id (the unified cache records ids)
        # Seconds on the engine's clock (SglangEngineView.arrival_of); by default from
        # the request's time stats.
        self._arrival = _arrival(req) - epoch if arrival is None else arrival
        self._read_metadata(getattr(req.sampling_params, "custom_params", None), trust, seal)

    # Read-only for policies, as every view.
    @property
    def request_id(self) -> str:
        return str(self.req.rid)

    def _claimed_priority(self) -> object:
        return self.req.priority

    def _bound_priority(self, claimed: object) -> int:
        if claimed is None or claimed == self._unset:
            return self._unset  # SGLang's own value for "none given": not clamped
        return super()._bound_priority(claimed)

    @property
    def arrival_time(self) -> float:
        return self._arrival

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.req.origin_input_ids)

    @property
    def num_computed_tokens(self) -> int:
        return int(self.req.kv.kv_committed_len)

    @property
    def num_output_tokens(self) -> int:
        return len(self.req.output_ids)

    @property
    def max_tokens(self) -> int:
        max_new = self.req.sampling_params.max_new_tokens
        return int(max_new) if max_new is not None else 0

    @property
    def num_preemptions(self) -> int:
        return int(self.req.retraction_count)

    @property
    def block_hashes(self) -> tuple[int, ...]:
        """Ids of the radix-tree nodes (``SglangNodeView.block_hash``) on the request's
        last prefix match, root first: the cached nodes it will reuse. SGLang matches a
        waiting request when it considers it for admission (and in cache-aware
        ``calc_priority``); empty before the first match, and empty on SGLang's default
        Rust tree core, whose nodes Python cannot walk (``--radix-cache-backend schedkit``
        selects the Python one, as eviction policies need)."""
        node = getattr(self.req, "last_node", None)
        if isinstance(node, int):  # the unified cache records node ids
            node = self._nodes(node) if self._nodes is not None else None
        ids: list[int] = []
        while node is not None and node.parent is not None:
            ids.append(int(node.id))
            node = node.parent
        return tuple(reversed(ids))

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens found in the prefix cache when SGLang admitted the request."""
        return int(getattr(self.req, "cached_tokens", 0) or 0)

    def __repr__(self) -> str:
        return f"SglangRequestView({self.request_id!r}, tenant={self.tenant!r})"


class SglangEngineView:
    """A ``schedkit.EngineView`` over an SGLang ``Scheduler``; one for the engine's life.

    KV capacity is counted in pages (``--page-size`` tokens, 1 by default): ``block_size``
    is the page size and ``kv_blocks_*`` are token-pool sizes divided by it. ``clock`` is
    seconds since the view was made on ``time.perf_counter`` (the clock SGLang stamps
    request times with), unless a driver brings its own (``use_clock``).
    """

    __slots__ = (
        "_arrival",
        "_now",
        "_scheduler",
        "block_size",
        "closing",
        "epoch",
        "kv_blocks_total",
        "step_index",
    )

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self._now: Callable[[], float] = _now
        self._arrival: Callable[[Any], float] = _arrival
        self.epoch = _now()
        self.block_size: int = max(1, int(getattr(scheduler, "page_size", 1) or 1))
        allocator = scheduler.token_to_kv_pool_allocator
        self.kv_blocks_total: int = int(allocator.size) // self.block_size
        self.step_index = 0
        self.closing: Any = None  # the batch whose step is being reported, meanwhile

    def node(self, node_id: int) -> Any:
        """The radix tree's node ``node_id`` now, or None (evicted, or another cache)."""
        core = getattr(self._scheduler.tree_cache, "tree_core", None)
        arena = getattr(core, "_node_arena", None)
        return arena.get(node_id) if arena is not None else None

    def use_clock(
        self, now: Callable[[], float], arrival: Callable[[Any], float], epoch: float = 0.0
    ) -> None:
        """Read the clock from ``now`` and each request's arrival from ``arrival`` (a
        ``Req`` -> its time on that clock) from here on, before any request arrives: a
        driver with its own clock passes them (the contract suite's step clock)."""
        self._now, self._arrival, self.epoch = now, arrival, epoch

    def arrival_of(self, req: Any) -> float:
        """When ``req`` arrived, in seconds on ``clock``."""
        return self._arrival(req) - self.epoch

    @property
    def clock(self) -> float:
        return self._now() - self.epoch

    @property
    def kv_blocks_free(self) -> int:
        scheduler = self._scheduler
        free = scheduler.token_to_kv_pool_allocator.available_size()
        free += scheduler.tree_cache.evictable_size()
        return int(free) // self.block_size

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished. SGLang drops finished requests from its
        running batch, and merges a prefill batch into it, only when it forms the next
        batch; so when a step is reported (``closing``) its finished requests are still
        in the running batch and its new ones not yet, and when a request arrives (or
        while the next batch is formed) the last prefill batch (``last_batch``) and the
        request being prefilled in chunks (``chunked_req``) may be outside it. Finished
        requests are skipped, the others counted once wherever they are. On a
        disaggregated prefill server (``--disaggregation-mode prefill``) a request whose
        prefill has ended is held for its KV transfer, not running (as the simulator's
        prefill instances count it): only a prompt still being prefilled in chunks is."""
        scheduler = self._scheduler
        mode = getattr(scheduler, "disaggregation_mode", None)
        if getattr(mode, "value", mode) == "prefill":
            chunked = getattr(scheduler, "chunked_req", None)
            return int(chunked is not None and not chunked.finished())
        reqs = scheduler.running_batch.reqs
        running = sum(1 for r in reqs if not r.finished())
        last = getattr(scheduler, "last_batch", None)
        if last is not None and not last.forward_mode.is_extend():
            last = None  # a decode batch runs the running batch's requests
        chunked = getattr(scheduler, "chunked_req", None)
        others = [
            r for b in (self.closing, last) if b is not None and b.reqs is not reqs for r in b.reqs
        ]
        if chunked is not None:
            others.append(chunked)
        if others:
            seen = {id(r) for r in reqs}
            running += len({id(r) for r in others if id(r) not in seen and not r.finished()})
        return running

    @property
    def num_waiting(self) -> int:
        return len(self._scheduler.waiting_queue)

    def cached_tokens(self, request: RequestView) -> int:
        """SGLang's own prefix match of the request's tokens (``tree_cache.match_prefix``
        on the key ``match_kv_cache`` builds, at most ``num_tokens - 1``): the device
        prefix admission would reuse now. Like SGLang's cache-aware policies when they
        sort (``lpm``, ``hrrn``), the lookup marks the matched prefix as used, so its
        LRU keeps it longer; the request itself is left as it was."""
        if not isinstance(request, SglangRequestView):
            return 0
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.common import _req_radix_key

        req, tree = request.req, self._scheduler.tree_cache
        if getattr(tree, "disable", False):
            return 0
        tokens = req.origin_input_ids + req.output_ids
        key = _req_radix_key(tree, req, tokens, req._compute_max_prefix_len(len(tokens)))
        return int(tree.match_prefix(MatchPrefixParams(key=key)).device_prefix_len)


class SglangNodeView(BlockSnapshot):
    """A ``schedkit.BlockView`` over an evictable leaf of SGLang's radix tree.

    A node holds a run of tokens (a whole prompt suffix, not one fixed-size block);
    evicting it frees all of them. ``depth`` counts the node's ancestors below the root
    and ``num_hits`` is SGLang's hit count. ``last_access`` is SGLang's logical access
    counter, not seconds: it orders accesses (larger is more recent) and nothing more.
    """

    __slots__ = ("node", "num_tokens")

    def __init__(self, node: Any) -> None:
        self.node = node
        depth = 0
        parent = node.parent
        while parent is not None and parent.parent is not None:
            depth += 1
            parent = parent.parent
        super().__init__(
            int(node.id),
            depth,
            float(node.last_access_time),
            int(getattr(node, "hit_count", 0)),
        )
        self.num_tokens: int = len(node.key)

    def __repr__(self) -> str:
        return f"SglangNodeView(id={self.block_hash}, tokens={self.num_tokens})"
