"""Prefill/decode disaggregation: prefill instances and decode instances, each a
simulated engine, joined by a KV link (``schedkit.sim.kvlink``).

A request goes as vLLM's disaggregated proxy sends it (``toy_proxy_server.py`` of its
NIXL and Mooncake connectors):

1. The router picks a prefill instance (``route_request`` over the prefill pool). There
   the request runs with ``max_tokens=1``: its prompt is computed and its one token is
   dropped. Its KV blocks stay held once it ends, until its KV has been sent.
2. When its prefill ends, the router picks a decode instance (``route_request`` over the
   decode pool), which receives the whole request. It waits in that instance's queue
   (the decode side's ``admit_request``, ``waiting_key`` and ``order_waiting`` decide)
   until it is admitted: the instance takes KV blocks for the whole prompt, and asks
   the link for them (vLLM's ``WAITING_FOR_REMOTE_KVS``; SGLang's pre-allocation queue).
   A decode instance's local prefix cache hits are not sent.
3. The transfer queues on the prefill instance's egress and the decode instance's
   ingress. When it lands, the prefill instance frees the blocks, and the decode
   instance runs the request before its waiting ones: it computes the last prompt token
   (vLLM recomputes it) and samples the first output token, then decodes.

TTFT is vLLM's for this deployment: from arrival to the decode instance's first token,
which is what its proxy streams. SGLang's router streams the prefill's token once the
decode instance has it, one decode step earlier. Each request's record keeps the times
between (``RequestRecord.handoff``), so a run says where time went: prefill queue,
prefill, waiting for decode KV blocks, waiting for the link, transfer, decode queue,
decode.

The engines run as one discrete-event simulation: at each turn the engine whose next
step starts first runs, up to the next engine's or the next event's time (an arrival,
a prefill's end, a transfer landing), so no engine decides anything before what
another did earlier reached it.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from schedkit.decisions import BatchBudget
from schedkit.facade import PolicyFacade
from schedkit.records import Handoff, RequestRecord, RunResult
from schedkit.sim.cluster import SimReplicaView, merge
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.sim.kv.blocks import blocks_for
from schedkit.sim.kvlink import Fabric, KVLinks
from schedkit.sim.request import SimRequest, TraceLike, record_of
from schedkit.sim.stretch import TIME_EPS

__all__ = ["DecodeEngine", "DisaggCluster", "Pool", "PrefillEngine"]


@dataclass(frozen=True)
class Pool:
    """One side of the deployment: its instances' policies (one facade each), step cost,
    engine config and tensor parallelism."""

    facades: Sequence[PolicyFacade]
    cost: StepCost
    config: SimConfig
    tp: int = 1


class PrefillEngine(SimEngine):
    """A prefill instance: a request ends with its first token, and its KV blocks stay
    held until ``release``; with nothing it can run while blocks are held, it stalls
    until another engine's event frees some."""

    def __init__(self, cost: StepCost, config: SimConfig, facade: PolicyFacade, stretch: bool):
        super().__init__([], cost, config, facade, stretch=stretch)
        self.prefilled: list[SimRequest] = []  # prefills ended since the cluster looked

    def _free(self, req: SimRequest, clock: float) -> None:
        self.prefilled.append(req)
        self.held.add(req)  # its blocks wait for the transfer

    def release(self, req: SimRequest, when: float) -> None:
        """``req``'s KV has been sent (or is no longer wanted): its blocks are freed."""
        self.kv.release(req.blocks, when)
        self.held.remove(req)
        self.wake(when)

    def wake(self, when: float) -> None:
        """Something reached it at ``when``: stalled, it tries again from then."""
        if self.stalled:
            self.stalled = False
            self.clock = max(self.clock, when)

    def _execute(
        self, scheduled: dict[SimRequest, int], preempted: list[SimRequest], lane: int = 0
    ) -> None:
        if not scheduled and not preempted and not lane and self.held:
            self.stalled = True  # until a transfer frees blocks (or a request arrives)
            return
        super()._execute(scheduled, preempted, lane)


class DecodeEngine(SimEngine):
    """A decode instance: a request routed here asks for its prompt's KV once admitted
    (``ask``) and pauses until the link says when it lands (``landing``: transfers are
    booked in the order they were asked for, across decode instances), then runs it
    before any waiting request."""

    def __init__(
        self,
        cost: StepCost,
        config: SimConfig,
        facade: PolicyFacade,
        stretch: bool,
        ask: Callable[[SimRequest, int, float], None],
        rejected: Callable[[SimRequest, float], None],
    ):
        super().__init__([], cost, config, facade, stretch=stretch)
        self.loads_kv = True
        self.remote: set[SimRequest] = set()  # routed here, KV still on a prefill instance
        self.unbooked = 0  # transfers asked for, their landing not known yet
        self._ask = ask
        self._rejected = rejected

    def _extra_blocks(self, req: SimRequest, cached: int) -> int:
        """The prompt's blocks past the local prefix cache's hit, all to be sent (the
        last token among them is computed again here); none after a preemption, when
        the request is computed here again, as vLLM does."""
        if req not in self.remote:
            return 0
        return blocks_for(req.num_tokens, self.cfg.block_size) - cached

    def _start_load(self, req: SimRequest, hit: int, own: int, extra: int) -> None:
        self.remote.discard(req)
        self._admit(req, hit, own, req.num_tokens - 1, extra)
        self.loading.append((math.inf, req, hit + own))  # its landing: ``landing``
        self.unbooked += 1
        self.stalled = True  # pauses after this step, until the link answers
        self._ask(req, extra, self.clock)

    def landing(self, req: SimRequest, when: float) -> None:
        """The link's answer: ``req``'s KV lands at ``when``."""
        loading = self.loading
        i = next(i for i, (_, r, _) in enumerate(loading) if r is req)
        loading[i] = (when, req, loading[i][2])
        self.unbooked -= 1
        if not self.unbooked:
            self.stalled = False

    def wake(self, when: float) -> None:
        """A request reached it at ``when``: it steps from then (paused, once unpaused)."""

    def _wait_for_loads(self) -> bool:
        if self.unbooked:  # paused: a landing is not known yet
            return True
        return super()._wait_for_loads()

    def _run_landed(
        self, scheduled: dict[SimRequest, int], token_budget: int, budget: BatchBudget, chunk: int
    ) -> int:
        before = len(self.running)
        left = super()._run_landed(scheduled, token_budget, budget, chunk)
        for req in self.running[before:]:
            handoff = req.record.handoff
            if handoff is not None:
                handoff.decode_start_s = self.clock
        return left

    def _reject(self, req: SimRequest, reason: str) -> None:
        super()._reject(req, reason)
        if req in self.remote:
            self.remote.discard(req)
            self._rejected(req, self.clock)


def ready(engine: SimEngine) -> float:
    """When ``engine`` next steps on its own; inf when it waits for something to reach it."""
    if engine.stalled:
        return math.inf
    if engine.running or engine.waiting:
        return engine.clock
    due = math.inf  # idle: until a request delivered arrives or a load lands
    if engine.arrived < len(engine.pending):
        due = engine.pending[engine.arrived].record.arrival_s
    if engine.loading:
        due = min(due, engine.loading[0][0])
    return max(engine.clock, due)


class DisaggCluster:
    """``prefill`` and ``decode`` pools behind ``router`` (``route_request`` once per
    pool; round-robin in each where it has no answer), joined by ``link``; KV is
    ``kv_bytes_per_token`` bytes a token for the whole model (every TP rank's share)."""

    def __init__(
        self,
        requests: Iterable[TraceLike],
        prefill: Pool,
        decode: Pool,
        link: Fabric,
        kv_bytes_per_token: int,
        router: PolicyFacade,
        *,
        stretch: bool = True,
    ) -> None:
        self.traces = sorted(requests, key=lambda r: r.arrival_s)  # stable: trace order
        self.prefill = [
            PrefillEngine(prefill.cost, prefill.config, f, stretch) for f in prefill.facades
        ]
        self.decode = [
            DecodeEngine(
                decode.cost,
                decode.config,
                f,
                stretch,
                partial(self._ask, j),
                self._rejected,
            )
            for j, f in enumerate(decode.facades)
        ]
        self.engines: list[SimEngine] = [*self.prefill, *self.decode]
        self.prefill_views = [SimReplicaView(i, e, "prefill") for i, e in enumerate(self.prefill)]
        self.decode_views = [SimReplicaView(j, e, "decode") for j, e in enumerate(self.decode)]
        self.links = KVLinks(link, prefill.tp, decode.tp, len(self.prefill), len(self.decode))
        self.block_bytes = decode.config.block_size * kv_bytes_per_token
        self.pcfg, self.dcfg = prefill.config, decode.config
        self.router = router
        self.records: list[RequestRecord] = []  # one per request, in arrival order
        self.prefill_legs: list[SimRequest] = []
        self.decode_legs: list[SimRequest | None] = []
        self.routed = [0] * len(self.prefill)
        self.decode_routed = [0] * len(self.decode)
        self._turns = [0, 0]
        # (time, request index): prefills ended, to hand off; transfers landed or refused,
        # their prefill blocks to free; transfers asked for, to book in time order
        self._handoffs: list[tuple[float, int]] = []
        self._lands: list[tuple[float, int]] = []
        self._asks: list[tuple[float, int, int, int]] = []  # (time, decode, seq, index)
        self._asked = 0
        self._blocks: dict[int, int] = {}  # request index -> blocks its transfer moves
        # a request's prefill takes at least this: a decode instance may run this far
        # past the earliest a prefill could end (its hand-offs come no sooner)
        self._lookahead = max(0.0, prefill.cost.step_time(1, 0, 1, 1))
        self._next = 0  # the next request to arrive
        self._started: float | None = None
        self.now = 0.0  # where a watched run stopped: nothing is left to happen before it

    # -- the run ----------------------------------------------------------------------

    def run(self) -> RunResult:
        """Route every request not routed yet, run each engine to its end, and merge
        their results."""
        if self._started is None:
            self._started = time.perf_counter()
        started = self._started
        with no_cyclic_gc():
            self._loop(len(self.traces))
            self._check_done()
            results = [e.finish(started) for e in self.engines]
            for i in range(len(self.records)):
                self.refreshed(i)
        merged = merge(results, self.records, self.router, self.routed, self.pcfg, started)
        first = results[: len(self.prefill)]  # prefix-cache figures are the prefill side's:
        merged.prefix_query_tokens = sum(r.prefix_query_tokens for r in first)  # a decode
        merged.prefix_hit_tokens = sum(r.prefix_hit_tokens for r in first)  # loads the rest
        merged.decode_routed = list(self.decode_routed)
        return merged

    def route(self, upto: int) -> None:
        """Run until the requests before index ``upto`` (in arrival order) have arrived,
        and everything before the next arrival has happened (a caller watching the run:
        ``refreshed``, ``now``)."""
        if self._started is None:
            self._started = time.perf_counter()
        with no_cyclic_gc():
            self._loop(min(upto, len(self.traces)))

    def _loop(self, upto: int) -> None:
        """Run in time order until request ``upto`` is the next thing to happen.

        Each turn does the earliest of: an arrival, a hand-off, a landing, or the step
        of the engine due first. Booking a transfer waits until no decode instance could
        still ask for one earlier. The engine that steps runs on until something could
        reach it: a prefill instance, until an arrival, a landing, or a decode instance
        that could book a transfer freeing its blocks; a decode instance, until a
        hand-off could come (a prefill's end, ``_lookahead`` after the earliest a prefill
        step could start, or the earliest a transfer freeing a prefill's blocks could be
        booked). So each engine's decisions see everything earlier."""
        traces = self.traces
        handoffs, lands, asks = self._handoffs, self._lands, self._asks
        inf, lookahead = math.inf, self._lookahead
        n, nxt = len(traces), self._next
        while True:
            due = traces[nxt].arrival_s if nxt < n else inf
            h = handoffs[0][0] if handoffs else inf
            land = lands[0][0] if lands else inf
            ask = asks[0][0] if asks else inf
            rp, p_first, rd, d_first, floor = self._next_steps()
            # the earliest a decode instance could ask for a transfer: at its next step
            # if it holds a request whose KV is to come (``floor``), else once one is
            # handed off: from the heap, or at the end of a prefill step, which could
            # start at the next prefill's step, arrival, landing or booking
            coming = min(h, min(rp, due, land, ask, floor) + lookahead)
            if ask < inf and ask <= min(floor, coming):
                self._book(*heapq.heappop(asks))
                continue
            event = min(due, h, land)
            if event < inf and event <= min(rp, rd):
                if lands and land <= event:
                    self._release(*heapq.heappop(lands))
                elif handoffs and h <= event:
                    self._hand_off(*heapq.heappop(handoffs))
                elif nxt < upto:
                    self._arrive(nxt)
                    nxt += 1
                else:
                    self.now = due
                    break
                continue
            if rp == inf and rd == inf:  # nothing left (a booking would have been made)
                self.now = inf
                break
            if rp <= rd:
                assert p_first is not None
                self._prefill_steps(p_first, rp, min(due, land, ask, floor, h))
            else:
                assert d_first is not None
                d_first.advance(max(self._bounded(d_first, coming), rd + 2 * TIME_EPS))
        self._next = nxt

    def _prefill_steps(self, engine: PrefillEngine, ready_at: float, until: float) -> None:
        """``engine``'s steps up to ``until`` (one at least), its ended prefills to hand off."""
        engine.advance(max(self._bounded(engine, until), ready_at + 2 * TIME_EPS))
        for leg in engine.prefilled:
            assert leg.record.first_token_s is not None
            heapq.heappush(self._handoffs, (leg.record.first_token_s, leg.index))
        engine.prefilled.clear()

    def _next_steps(
        self,
    ) -> tuple[float, PrefillEngine | None, float, DecodeEngine | None, float]:
        """The prefill and the decode instance due first and when, and the earliest a
        decode instance holding a request whose KV is to come could ask for it (at its
        next step; a paused one, no earlier than its clock)."""
        inf = math.inf
        rp, p_first = inf, None
        for engine in self.prefill:
            r = ready(engine)
            if r < rp:
                rp, p_first = r, engine
        rd, d_first, floor = inf, None, inf
        for d_engine in self.decode:
            r = ready(d_engine)
            if r < rd:
                rd, d_first = r, d_engine
            if d_engine.remote:
                if d_engine.unbooked:
                    r = d_engine.clock
                if r < floor:
                    floor = r
        return rp, p_first, rd, d_first, floor

    def _bounded(self, engine: SimEngine, until: float) -> float:
        """How far ``engine`` runs this turn: ``until`` (a reference run for tests
        bounds it by every other engine's next step too)."""
        del engine
        return until

    def _check_done(self) -> None:
        for engine in self.engines:
            if engine.stalled or engine.waiting or engine.running:
                raise RuntimeError(f"disaggregated run ended with work left: {engine!r}")

    def _route(self, leg: SimRequest, views: Sequence[SimReplicaView], pool: int) -> int:
        chosen = self.router.route(leg, views) if self.router.has_route else None
        if chosen is None:
            chosen = self._turns[pool]
            self._turns[pool] = (chosen + 1) % len(views)
        return chosen

    def _arrive(self, index: int) -> None:
        """Request ``index`` arrives: to the prefill instance the router picks."""
        trace = self.traces[index]
        record = record_of(trace)
        leg = SimRequest.from_trace(index, trace, self.pcfg.block_size, self.pcfg.hash_block_tokens)
        leg.record.max_tokens = 1  # as vLLM's proxy sends it
        chosen = self._route(leg, self.prefill_views, 0)
        self.routed[chosen] += 1
        record.handoff = leg.record.handoff = Handoff(prefill_replica=chosen)
        self.records.append(record)
        self.prefill_legs.append(leg)
        self.decode_legs.append(None)
        engine = self.prefill[chosen]
        engine.deliver_request(leg)
        engine.wake(trace.arrival_s)

    def _release(self, when: float, index: int) -> None:
        """Request ``index``'s KV landed (or was refused): its prefill's blocks are freed."""
        leg = self.prefill_legs[index]
        handoff = leg.record.handoff
        assert handoff is not None
        self.prefill[handoff.prefill_replica].release(leg, when)

    def _hand_off(self, when: float, index: int) -> None:
        """Request ``index``'s prefill ended at ``when``: to the decode instance the router
        picks, which will ask for its KV once it admits it."""
        handoff = self.prefill_legs[index].record.handoff
        assert handoff is not None
        handoff.prefill_end_s = when
        trace = self.traces[index]
        leg = SimRequest.from_trace(index, trace, self.dcfg.block_size, self.dcfg.hash_block_tokens)
        leg.record.arrival_s = when
        leg.record.handoff = handoff
        chosen = self._route(leg, self.decode_views, 1)
        self.decode_routed[chosen] += 1
        handoff.decode_replica = chosen
        self.decode_legs[index] = leg
        engine = self.decode[chosen]
        engine.remote.add(leg)
        engine.deliver_request(leg)

    def _ask(self, target: int, leg: SimRequest, blocks: int, now: float) -> None:
        """Decode instance ``target`` admitted ``leg`` at ``now`` with ``blocks`` to load."""
        handoff = leg.record.handoff
        assert handoff is not None
        handoff.kv_alloc_s = now
        self._blocks[leg.index] = blocks
        heapq.heappush(self._asks, (now, target, self._asked, leg.index))
        self._asked += 1

    def _book(self, now: float, target: int, seq: int, index: int) -> None:
        """The transfer asked for at ``now``, booked on the link (no decode instance can
        ask for one earlier any more): it lands, and the prefill frees its blocks, then."""
        del seq
        leg = self.decode_legs[index]
        assert leg is not None and leg.record.handoff is not None
        handoff = leg.record.handoff
        nbytes = self._blocks.pop(index) * self.block_bytes
        start, landing = self.links.book(handoff.prefill_replica, target, nbytes, now)
        handoff.transfer_start_s, handoff.transfer_end_s = start, landing
        heapq.heappush(self._lands, (landing, index))
        self.decode[target].landing(leg, landing)

    def _rejected(self, leg: SimRequest, now: float) -> None:
        """The decode instance refused ``leg``: its prefill's blocks are freed now."""
        heapq.heappush(self._lands, (now, leg.index))

    # -- the requests' records ------------------------------------------------------

    def refreshed(self, index: int) -> RequestRecord:
        """Request ``index``'s record as of now, from its two legs: queued and scheduled
        as its prefill, first token, output and finish as its decode; rejected where
        either was."""
        record, p, d = self.records[index], self.prefill_legs[index], self.decode_legs[index]
        pr = p.record
        record.scheduled_s = pr.scheduled_s
        record.cached_tokens = pr.cached_tokens
        record.preemptions = pr.preemptions
        record.recomputed_tokens = pr.recomputed_tokens
        if pr.rejected:
            record.finish_reason, record.reject_reason = pr.finish_reason, pr.reject_reason
            return record
        if d is None:  # prefilling, or waiting to be handed off: not finished
            return record
        dr = d.record
        record.first_token_s = dr.first_token_s
        record.finish_s = dr.finish_s
        record.output_tokens = dr.output_tokens
        record.finish_reason, record.reject_reason = dr.finish_reason, dr.reject_reason
        record.preemptions += dr.preemptions
        record.recomputed_tokens += dr.recomputed_tokens
        return record

    def first_token_floor(self, index: int) -> float:
        """No first token still to come can come before this (a watched run's ``now``)."""
        del index
        return self.now
