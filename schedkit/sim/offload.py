"""vLLM's KV offloading (``--kv-offloading-size``) in the simulated engine: loads from host
memory instead of recomputing.

Every full block a step computes is written through to the host tier
(``schedkit.sim.kv.host``; the writes cost the engine nothing: vLLM copies them out
asynchronously, and a PCIe link carries both directions at once). When the request at
the head of the waiting queue is admitted and the host tier holds more of its prompt
than the GPU prefix cache, it starts an asynchronous load of those blocks, as vLLM's
offloading connector does (``WAITING_FOR_REMOTE_KVS``): it takes their GPU blocks and
leaves the queue, but no running slot and no token budget, so admission goes on with the
next request. Loads share one host-to-GPU link, one after another: a load of ``n``
blocks takes ``n * host_kv_block_load_s`` once the link is free, then
``host_kv_load_latency_s``. A request whose load landed runs before any waiting request
(vLLM's ``kv_holding_waiting``), when a running slot, the token budget and GPU blocks
for its next chunk allow. Its queue time ends when its load starts; its TTFT counts the
load. While landed requests wait for room, no waiting request is admitted ahead of them;
if nothing runs and none fits, the last to land gives its blocks back and waits again.

With a tier the engine steps one step at a time (no decode stretches): the tier's LRU
order follows the steps that fill each block.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from schedkit.sim.kv.blocks import blocks_for
from schedkit.sim.kv.host import HostTier

if TYPE_CHECKING:
    from schedkit.decisions import BatchBudget
    from schedkit.facade import PolicyFacade
    from schedkit.records import RunResult
    from schedkit.sim.config import SimConfig
    from schedkit.sim.kv.cache import KVCache
    from schedkit.sim.request import SimRequest
    from schedkit.views import EngineView

__all__ = ["HostTierLoads"]


class HostTierLoads:
    """The host tier and the loads in flight, for :class:`SimEngine`."""

    if TYPE_CHECKING:
        cfg: SimConfig
        clock: float
        next_event: float
        facade: PolicyFacade
        kv: KVCache
        result: RunResult
        running: list[SimRequest]
        view: EngineView

        def _admit(self, req: SimRequest, hit: int, own: int, computed: int, need: int) -> None: ...
        def _publish(self, req: SimRequest, num_new: int) -> None: ...
        def _enter(self, req: SimRequest) -> None: ...
        def _requeue(self, req: SimRequest) -> None: ...

    def _init_host(self, group_blocks: int) -> None:
        cfg = self.cfg
        self.host: HostTier | None = None
        # blocks may be loaded instead of computed: from the host tier here, or from a
        # prefill instance (``schedkit.sim.disagg``); they come by ``_extra_blocks``
        self.loads_kv = bool(cfg.host_kv_blocks)
        if cfg.host_kv_blocks:
            self.host = HostTier(
                cfg.host_kv_blocks, group_blocks, self.facade, self.view, cfg.eviction_window
            )
        # (landing time, request, its first loaded block), in landing order
        self.loading: deque[tuple[float, SimRequest, int]] = deque()
        self.link_free = 0.0  # when the host-to-GPU link finishes its last load
        self.landed_stuck = False  # the last try left a landed request without room

    def _extra_blocks(self, req: SimRequest, cached: int) -> int:
        """Blocks to load, not compute: those of ``req``'s prompt after its first
        ``cached`` (the GPU prefix cache's hit) that the host tier holds, at most up to
        its last prompt token, which is always computed."""
        host = self.host
        if host is None:
            return 0
        limit = (req.num_tokens - 1) // self.cfg.block_size
        return host.lookup(req.blocks, cached, limit) if cached < limit else 0

    def _start_load(self, req: SimRequest, hit: int, own: int, extra: int) -> None:
        """``req`` takes its GPU hits and ``extra`` blocks, and loads those from host."""
        assert self.host is not None
        bs, cfg = self.cfg.block_size, self.cfg
        self._admit(req, hit, own, (hit + own + extra) * bs, extra)
        self.host.load(req.blocks, hit + own, extra, self.clock)
        start = max(self.clock, self.link_free)
        self.link_free = start + extra * cfg.host_kv_block_load_s
        self.loading.append((self.link_free + cfg.host_kv_load_latency_s, req, hit + own))
        self.result.host_hit_tokens += extra * bs

    def _landed(self) -> bool:
        """Whether a load has landed and its request waits to run."""
        loading = self.loading
        return bool(loading) and loading[0][0] <= self.clock

    def _next_landing(self, until: float) -> float:
        """The earlier of ``until`` and the next landing still to come."""
        loading = self.loading
        return min(until, loading[0][0]) if loading and loading[0][0] > self.clock else until

    def _run_landed(
        self, scheduled: dict[SimRequest, int], token_budget: int, budget: BatchBudget, chunk: int
    ) -> int:
        """Requests whose loads landed join the batch first, in landing order, each as its
        next chunk's GPU blocks allow (one that does not fit keeps its place); the token
        budget left."""
        loading, running, kv, bs = self.loading, self.running, self.kv, self.cfg.block_size
        kept: list[tuple[float, SimRequest, int]] = []
        while loading and loading[0][0] <= self.clock:
            if token_budget <= 0 or len(running) >= budget.max_running:
                break
            entry = loading.popleft()
            _, req, first = entry
            computed = req._num_computed_tokens
            num_new = req.num_tokens - computed
            if chunk and num_new > chunk:
                num_new = chunk
            num_new = min(num_new, token_budget)
            need = blocks_for(computed + num_new, bs) - req.blocks.nblocks
            if need > 0 and not kv.can_allocate(0, need):
                kept.append(entry)
                continue
            if self.cfg.enable_prefix_caching:  # the loaded blocks join the cache
                kv.publish(req.blocks, first, computed // bs)
            if need > 0:
                kv.take(need)
                kv.add_blocks(req.blocks, need)
            self._enter(req)
            scheduled[req] = num_new
            self._publish(req, num_new)
            token_budget -= num_new
        loading.extendleft(reversed(kept))
        self.landed_stuck = bool(kept)
        return token_budget

    def _wait_for_loads(self) -> bool:
        """A step that runs nothing while loads are in flight: to the next landing (or
        arrival), or back to a request that landed this step and is yet to try for room;
        one that found none, with nothing running, gives way (``_unload``). False: no
        load explains the idle step."""
        wake = self._next_landing(self.next_event)
        if self.clock < wake < math.inf:
            self.clock = wake
            return True
        if not self._landed():
            return False
        if self.landed_stuck and not self.running:
            self._unload()  # landed loads hold the blocks every other request needs
        return True

    def _unload(self) -> None:
        """Nothing runs, nothing can be admitted and no load is to land: the last request
        whose load landed gives its blocks back and waits again, as a preempted one (its
        prefix stays in host memory)."""
        i = max(i for i, (t, _, _) in enumerate(self.loading) if t <= self.clock)
        _, req, _ = self.loading[i]
        del self.loading[i]
        self._requeue(req)
