"""Discrete-event, continuous-batching engine with vLLM V1's scheduling semantics.

Each step schedules running requests first (decode, or the next prefill chunk), then
admits waiting ones, under a token budget and a cap on running requests; when KV blocks
run out, running requests are preempted by recompute. With ``mixed_prefill=False``
(SGLang's schedule) a step that can prefill runs prefills only, ahead of decode. Step durations come from a cost
model. Arrivals are processed in trace order before the step that starts at or after
them, so a seed and a trace give one event order and one result.

Cost grows with events, not decode steps: when every running request is decoding and
nothing waiting could be admitted, the stretch of identical steps up to the next event (an
arrival, a completion, KV blocks running out) is advanced in one go, with the same
outcome as stepping one by one (``stretch=False`` does that, for tests;
``schedkit.sim.stretch``). Nor does a step's cost grow with the requests decoding in it:
those that decode one token every step are advanced together, in the decode lane
(``schedkit.sim.lane``; ``lane=False`` steps each request, for observers of whole batches).

The policies' decisions are asked for in one method each: ``_order_waiting``,
``_policy_victims`` and, in the KV cache, ``KVCache._evict_by_policy``.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from schedkit.decisions import BatchBudget, StepReport
from schedkit.facade import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.cadence import PrefillCadence, in_prefill
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.kv.blocks import blocks_for
from schedkit.sim.kv.cache import KVCache
from schedkit.sim.lane import LaneSteps, by_seq
from schedkit.sim.offload import HostTierLoads
from schedkit.sim.recorder import Recorder
from schedkit.sim.request import SimRequest, TraceLike
from schedkit.sim.stretch import TIME_EPS, DecodeStretches
from schedkit.sim.view import SimEngineView
from schedkit.sim.waiting import FifoWaiting, KeyedWaiting, make_waiting

__all__ = ["SimConfig", "SimEngine", "StepCost", "no_cyclic_gc"]

GAPS_KEPT = 1 << 16  # single-token gaps listed before the recorder counts them


class SimEngine(DecodeStretches, LaneSteps, PrefillCadence, HostTierLoads):
    """Replays requests through the selected policies; ``run()`` returns a RunResult."""

    def __init__(
        self,
        requests: Iterable[TraceLike],
        cost: StepCost,
        config: SimConfig,
        facade: PolicyFacade,
        *,
        stretch: bool = True,
        lane: bool = True,
        check_invariants: bool = False,
    ) -> None:
        self.cfg = config
        self.cost = cost
        self.facade = facade
        self.stretch = stretch
        self.check_invariants = check_invariants
        self.clock = 0.0
        self.step_index = 0
        self.running: list[SimRequest] = []
        self.view = SimEngineView(self)
        # FIFO, or kept in waiting_key order as requests join (sim/waiting.py)
        self.waiting: FifoWaiting[SimRequest] | KeyedWaiting[SimRequest] = make_waiting(
            facade, self.view
        )
        per_group = config.hash_block_tokens // config.block_size
        if per_group * config.block_size != config.hash_block_tokens:
            per_group = 0
        self.kv = KVCache(
            config.num_blocks,
            config.block_size,
            prefix_caching=config.enable_prefix_caching,
            facade=facade,
            engine=self.view,
            eviction_window=config.eviction_window,
            group_blocks=per_group,
        )
        self._init_host(per_group)  # vLLM's KV offloading to host memory, when sized
        self._init_lane(lane)  # requests decoding in step, advanced together
        self.pending = [
            SimRequest.from_trace(i, r, config.block_size, config.hash_block_tokens)
            for i, r in enumerate(requests)
        ]
        self.pending.sort(key=lambda r: r.record.arrival_s)  # stable: trace order breaks ties
        self.arrived = 0  # index of the first pending request not yet arrived
        self.holding = False  # max_concurrency: the client holds requests already due
        self.stalled = False  # nothing can run until another engine acts (sim/disagg.py)
        self.ordered = False  # order_waiting was asked at this step's start
        self.held: set[SimRequest] = set()  # finished, blocks kept for another engine
        self.ended = 0  # requests that finished with the last step
        self.next_event = math.inf  # the next arrival or landing, as the next step starts
        self._init_cadence()  # vLLM's prefill_schedule_interval, cache-aware admission
        self.default_budget = BatchBudget(
            config.max_num_batched_tokens, config.max_num_seqs, config.long_prefill_token_threshold
        )
        self.result = RunResult(
            policy=facade.label, records=[r.record for r in self.pending], duration_s=0.0
        )
        self.recorder = Recorder(self.result, config.timeline_interval_s)

    # -- main loop ------------------------------------------------------------------

    def run(self) -> RunResult:
        with no_cyclic_gc():
            return self._run()

    def _run(self) -> RunResult:
        started = time.perf_counter()
        self.advance(math.inf)
        return self.finish(started)

    def advance(self, until: float) -> None:
        """Run the requests delivered so far, step by step, while a step would start
        before ``until``: nothing is known of arrivals after it (a cluster's router
        delivers them as they arrive, ``deliver_request``; ``run`` knows them all)."""
        pending, nxt = self.pending, self.arrived
        limit = self.cfg.max_concurrency  # the client's: requests in flight, at most
        while nxt < len(pending) or self.running or self.waiting or self.loading:
            if not self.running and not self.waiting and not self._landed():
                due = pending[nxt].record.arrival_s if nxt < len(pending) else math.inf
                # idle until then, or until the caller may deliver a request
                self.clock = max(self.clock, min(self._next_landing(due), until))
            if self.clock + TIME_EPS >= until:  # an arrival not yet delivered may join first
                break
            while nxt < len(pending) and pending[nxt].record.arrival_s <= self.clock + TIME_EPS:
                if limit is not None and self._held(pending[nxt], limit):
                    break
                self.clock = max(self.clock, pending[nxt].record.arrival_s)  # never before arrival
                self._arrive(pending[nxt])
                nxt += 1
            else:
                self.holding = False  # every request due has been sent
            if not self.running and not self.waiting and not self._landed():
                continue
            next_arrival = pending[nxt].record.arrival_s if nxt < len(pending) else until
            if limit is not None and len(self.running) + len(self.waiting) >= limit:
                next_arrival = until  # none is sent before a request in flight ends
            if self.loading:
                next_arrival = self._next_landing(next_arrival)
            budget = self._budget()
            # a host tier is written through step by step, so no stretches with one; nor
            # while a request whose KV landed waits to run
            stretch = self.stretch and self.host is None and not self._landed()
            if not (stretch and self._advance_decode_stretch(next_arrival, budget)):
                self.next_event = next_arrival  # a step that runs nothing waits until then
                self._step(budget)
                self.waiting.end_step()  # a list hook's order lasts one step; the keyed order stays
                if self.stalled:  # waits for KV blocks another engine holds (sim/disagg.py)
                    break
            if self.check_invariants:
                self.check()
        self.arrived = nxt

    def _held(self, req: SimRequest, limit: int) -> bool:
        """Whether the client holds ``req``, due now, because ``limit`` requests are in
        flight; else, if it was held (or came due during the last step, while the requests
        that ended with it were in flight), it is sent now and its latencies count from now."""
        in_flight = len(self.running) + len(self.waiting)
        if in_flight >= limit:
            self.holding = True  # sent when a request in flight ends
            return True
        now = max(self.clock, req.record.arrival_s)
        if self.holding or (req.record.arrival_s < now and in_flight + self.ended >= limit):
            req.record.arrival_s = now
        return False

    def deliver_request(self, req: SimRequest) -> None:
        """A request routed here as it arrives, no earlier than those delivered before
        (a cluster's; its index names it uniquely there)."""
        if self.pending and req.record.arrival_s < self.pending[-1].record.arrival_s:
            raise ValueError("requests must be delivered in arrival order")
        self.pending.append(req)
        self.result.records.append(req.record)

    def finish(self, started: float) -> RunResult:
        """The run's result once every delivered request is done (``advance(inf)``)."""
        return self.recorder.finish(self.clock, self.step_index, self.facade, started)

    def _arrive(self, req: SimRequest) -> None:
        need = blocks_for(req.record.prompt_tokens + req.record.max_tokens, self.cfg.block_size)
        if need > self.cfg.num_blocks:
            self._reject(
                req, f"prompt + max_tokens need {need} KV blocks, capacity is {self.cfg.num_blocks}"
            )
            return
        if self.cfg.enable_prefix_caching:
            req.mark_hashes(self.cfg.block_size)
        decision = self.facade.admit(req, self.view)
        if not decision.admitted:
            self._reject(req, decision.reason)
            return
        self.waiting.append(req)

    def _reject(self, req: SimRequest, reason: str) -> None:
        req.record.finish_reason = "rejected"
        req.record.reject_reason = reason
        rej = self.result.rejections
        rej[reason] = rej.get(reason, 0) + 1
        if self.facade.has_finish_observer:
            self.facade.request_finished(req, "rejected", self.view)
        self._left(req)

    def _left(self, req: SimRequest) -> None:
        """``req`` finished. A policy may keep its view and read it later: it reads the
        request's last state (docs/hooks.md), hashes included; with no policy hook, the
        hashes go (the run keeps every request)."""
        if not self.facade.implemented:
            req.forget_hashes()

    # -- one step -------------------------------------------------------------------

    def _budget(self) -> BatchBudget:
        return self.facade.plan_batch(self.view, self.default_budget)

    def _step(self, budget: BatchBudget) -> None:
        self._order_waiting()  # the state before the step, as vLLM's and SGLang's adapters
        mixed = self.cfg.mixed_prefill
        if not mixed and self._prefill_step(budget):
            return
        token_budget = budget.token_budget
        running = self.running
        # vLLM's rule: the chunk cap keeps a long prefill from starving other requests, so
        # a request alone (nothing else running or waiting) may use the whole token budget
        chunk = budget.prefill_chunk if len(running) + len(self.waiting) > 1 else 0
        scheduled: dict[SimRequest, int] = {}
        preempted: list[SimRequest] = []
        # unmixed, a decode step leaves a chunk that found no blocks to the next prefill step;
        # a step vLLM's prefill cadence holds runs no chunk either
        cadence = self.prefill_interval > 1
        defer = cadence and self._defer_prefills()
        skip_chunks = defer or (not mixed and self._any_decoding())
        lane = self.lane
        plan = self._lane_plan(token_budget, chunk, skip_chunks) if lane.n else None
        if plan is not None:
            token_budget, prefill = self._lane_schedule(plan, scheduled, token_budget, cadence)
        else:
            if lane.n:  # a step the lane cannot take: every request steps on its own
                self._flush_lane()
            token_budget, prefill = self._schedule_running(
                scheduled, preempted, token_budget, chunk, skip_chunks, cadence
            )
        if not preempted and mixed:
            admitted = self._admit_waiting(scheduled, token_budget, budget, chunk, defer)
            prefill = prefill or admitted
        if cadence:
            self._count_step(bool(scheduled) or lane.n > 0, prefill)
        idle = not scheduled and not preempted and not lane.n
        if idle and self.loading and self._wait_for_loads():
            return
        self._execute(scheduled, preempted, lane.n)

    def _schedule_running(
        self,
        scheduled: dict[SimRequest, int],
        preempted: list[SimRequest],
        token_budget: int,
        chunk: int,
        skip_chunks: bool,
        cadence: bool,
    ) -> tuple[int, bool]:
        """Schedule the running requests in order, preempting where one needs blocks:
        the token budget left, and whether the step carries prefill."""
        running = self.running
        prefill = False  # the step carries prefill (the cadence restarts from it)
        bs, caching = self.cfg.block_size, self.cfg.enable_prefix_caching
        i = 0
        while i < len(running) and token_budget > 0:
            req = running[i]
            if skip_chunks and in_prefill(req):
                i += 1
                continue
            computed = req._num_computed_tokens
            num_new = req.num_tokens - computed
            if chunk and num_new > chunk:
                num_new = chunk
            if num_new > token_budget:
                num_new = token_budget
            fits = True
            victims: list[SimRequest] | None = None
            # only a step past its last block needs blocks, and may preempt (most decode
            # steps do not: checked here, not in a call per request)
            while computed + num_new > req.blocks.nblocks * bs and not self._grow(req, num_new):
                if victims is None:
                    victims = self._policy_victims(req)
                victim = self._next_victim(victims)
                if victim in scheduled:
                    token_budget += scheduled.pop(victim)
                    i -= 1
                elif skip_chunks and running.index(victim) < i:
                    i -= 1  # a skipped chunk before this request
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    fits = False
                    break
            if not fits:
                break
            scheduled[req] = num_new
            if caching and (computed + num_new) // bs > computed // bs:
                self._publish(req, num_new)
            token_budget -= num_new
            if cadence and not prefill:
                prefill = in_prefill(req)
            i += 1
        return token_budget, prefill

    def _prefill_step(self, budget: BatchBudget) -> bool:
        """``mixed_prefill=False`` (SGLang's schedule): a step that can prefill runs only
        prefills, the running requests' next chunks and then admissions, and no decode.
        False when there is nothing to prefill, and the caller runs a decode step."""
        token_budget, chunk = budget.token_budget, budget.prefill_chunk
        scheduled: dict[SimRequest, int] = {}
        for req in self.explicit:  # a lane's requests decode
            if token_budget <= 0 or not in_prefill(req):
                continue
            num_new = req.num_tokens - req._num_computed_tokens
            num_new = min(num_new, chunk or num_new, token_budget)
            if not self._grow(req, num_new):
                break  # no blocks for the next chunk: it waits for a decode step to end
            scheduled[req] = num_new
            self._publish(req, num_new)
            token_budget -= num_new
        self._admit_waiting(scheduled, token_budget, budget, chunk)
        if not scheduled:
            return False
        self._execute(scheduled, [])
        return True

    def _admit_waiting(
        self,
        scheduled: dict[SimRequest, int],
        token_budget: int,
        budget: BatchBudget,
        chunk: int,
        defer: bool = False,
    ) -> bool:
        """Admit waiting requests in queue order while they fit; ``defer``: the cadence
        holds prefill, so only a request whose prompt is cached but its last token is.
        Whether one admitted has prompt to compute (vLLM's ``prefill_admitted``)."""
        waiting, running, kv, bs = self.waiting, self.running, self.kv, self.cfg.block_size
        if self.loading and not defer:  # loads that landed run first (vLLM's kv_holding_waiting)
            token_budget = self._run_landed(scheduled, token_budget, budget, chunk)
            if self._landed():  # one left without room: no waiting request goes before it
                token_budget = 0
        if self.cache_window and not defer and not self.ordered:
            self._reorder_by_cached_prefix()  # vLLM's own: after the running requests' blocks
        prefill = False
        while waiting and token_budget > 0 and len(running) < budget.max_running:
            req = waiting[0]
            hit, own, reclaim = kv.lookup(req.blocks, req.num_tokens)
            computed = (hit + own) * bs
            extra = self._extra_blocks(req, hit + own) if self.loads_kv else 0
            if defer and computed + extra * bs < req.num_tokens - 1:
                break  # held until the cadence releases prefill
            if extra:  # a load from host memory: no running slot, no token budget
                if not kv.can_allocate(reclaim + own, max(extra, self._reserve(req, hit + own))):
                    break
                waiting.popleft()
                self._start_load(req, hit, own, extra)
                continue
            num_new = req.num_tokens - computed
            if chunk and num_new > chunk:
                num_new = chunk
            num_new = min(num_new, token_budget)
            need = blocks_for(computed + num_new, bs) - hit - own
            if not kv.can_allocate(reclaim + own, max(need, self._reserve(req, hit + own))):
                break
            waiting.popleft()
            self._admit(req, hit, own, computed, need)
            self._enter(req)
            scheduled[req] = num_new
            self._publish(req, num_new)
            token_budget -= num_new
            prefill = prefill or computed < req.num_tokens - 1
        if self.prefill_interval > 1 and not defer:  # a release: was it capacity-bound?
            self.capacity_bound = bool(waiting)
        return prefill

    def _enter(self, req: SimRequest) -> None:
        """``req`` joins the running batch, last in its order."""
        self.running.append(req)
        req._seq = self.admissions
        self.admissions += 1
        if self.lane_on:
            self.explicit.append(req)

    def _order_waiting(self) -> None:
        """The policy's order of the waiting queue, asked at the start of a step (before
        the running requests take their blocks) while a request waits and the batch has a
        free seat (with none, no order could admit anyone); the queue is left as is
        without one. ``ordered``: whether it was asked this step."""
        waiting = self.waiting
        self.ordered = bool(
            self.facade.has_order_list and waiting and len(self.running) < self.cfg.max_num_seqs
        )
        if not self.ordered:
            return
        order = self.facade.order_waiting(list(waiting), self.view, keyed=True)
        if order is not None:
            waiting.reorder(order)  # type: ignore[arg-type]

    def _admit(self, req: SimRequest, hit: int, own: int, computed: int, need: int) -> None:
        clock, kv = self.clock, self.kv
        if hit or own:
            kv.touch(req.blocks, hit, own)
        kv.take(need)
        kv.add_blocks(req.blocks, need)
        req._num_computed_tokens = computed
        res, rec = self.result, req.record
        if req._num_preemptions == 0:
            res.prefix_query_tokens += req.num_tokens
            res.prefix_hit_tokens += computed
        if rec.scheduled_s is None:
            rec.scheduled_s = clock
            rec.cached_tokens = req._num_cached_tokens = computed
        if req.lost_tokens:
            redone = max(0, req.lost_tokens - computed)
            res.recomputed_tokens += redone
            rec.recomputed_tokens += redone
            req.lost_tokens = 0

    def _reserve(self, req: SimRequest, cached: int) -> int:
        """Blocks a waiting request with ``cached`` blocks hit must find free to be
        admitted: its whole sequence when ``reserve_full_prompt`` (vLLM's
        scheduler_reserve_full_isl), else nothing extra."""
        if not self.cfg.reserve_full_prompt:
            return 0
        return blocks_for(req.num_tokens, self.cfg.block_size) - cached

    def _publish(self, req: SimRequest, num_new: int) -> None:
        """Cache the blocks this step fills, at scheduling time as vLLM does, so a request
        admitted later in the same step already hits them."""
        if self.cfg.enable_prefix_caching:
            bs, before = self.cfg.block_size, req._num_computed_tokens
            if (before + num_new) // bs > before // bs:
                self.kv.publish(req.blocks, before // bs, (before + num_new) // bs)
                if self.host is not None:  # written through to host memory
                    self.host.store(req.blocks, before // bs, (before + num_new) // bs, self.clock)

    def _grow(self, req: SimRequest, num_new: int) -> bool:
        """Give a running request the blocks for ``num_new`` more tokens, if they fit."""
        table = req.blocks
        need = blocks_for(req._num_computed_tokens + num_new, self.cfg.block_size) - table.nblocks
        if need <= 0:
            return True
        if not self.kv.can_allocate(0, need):
            return False
        self.kv.take(need)
        self.kv.add_blocks(table, need)
        return True

    def _policy_victims(self, needing: SimRequest) -> list[SimRequest]:
        """The policy's victim order for ``needing``, reversed so pop() takes the next."""
        if not self.facade.has_victims:
            return []
        chosen = self.facade.select_victims(list(self.running), needing, self.view)
        return list(reversed(chosen)) if chosen else []  # type: ignore[arg-type]

    def _next_victim(self, victims: list[SimRequest]) -> SimRequest:
        """The policy's next victim still running, else the engine default (newest)."""
        while victims:
            victim = victims.pop()
            if victim in self.running:
                return victim
        return self.running[-1]

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        if self.lane_on:  # the lane was flushed first
            self.explicit.remove(req)
        self._requeue(req)

    def _requeue(self, req: SimRequest) -> None:
        """``req`` gives its blocks back and waits at the queue's front (a preemption)."""
        self.kv.release(req.blocks, self.clock)
        req.lost_tokens = req._num_computed_tokens
        req._num_computed_tokens = 0
        req._num_preemptions += 1
        req.record.preemptions += 1
        self.result.preemptions += 1
        if self.cfg.enable_prefix_caching:  # its output is prompt now, cached in its own run
            req.mark_hashes(self.cfg.block_size)
        self.waiting.appendleft(req)

    def _execute(
        self, scheduled: dict[SimRequest, int], preempted: list[SimRequest], lane: int = 0
    ) -> None:
        """Run the step: ``scheduled`` computes its tokens, the ``lane`` requests of the
        decode lane one each (sim/lane.py)."""
        prefill = decode = kv_tokens = attn = 0
        for req, n in scheduled.items():
            c = req._num_computed_tokens
            if n == 1 and c == req.num_tokens - 1:
                decode += 1
                attn += c + 1
            else:
                prefill += n
                attn += n * c + n * (n + 1) // 2
            kv_tokens += c + n
        if lane:  # each computes one token after its computed ones
            tokens = self.lane.tokens + lane
            decode += lane
            attn += tokens
            kv_tokens += tokens
        ran = scheduled or lane
        duration = self.cost.step_time(prefill, decode, kv_tokens, attn) if ran else 0.0
        if not ran and not preempted:
            raise RuntimeError(f"simulator made no progress at t={self.clock}: {self.running=}")
        self.recorder.kv_usage(duration, self.kv.num_used / self.kv.num_blocks)
        self.clock += duration
        self.step_index += 1
        clock, gaps = self.clock, self.recorder.gaps
        finished = []
        for req, n in scheduled.items():
            req._num_computed_tokens = after = req._num_computed_tokens + n
            if after == req.num_tokens:
                if req.record.first_token_s is None:
                    req.record.first_token_s = clock
                else:
                    gaps.append(clock - req.last_token_s)
                req.last_token_s = clock
                req._num_output_tokens += 1
                req.num_tokens += 1
                if req._num_output_tokens >= req.record.max_tokens:
                    finished.append(req)
        if len(gaps) > GAPS_KEPT:
            self.recorder.count_gaps()
        if lane:
            self.recorder.count_gap(clock - self.lane.last_token_s, lane)
            done = self.lane.advance(1, clock)
            if done:
                finished = by_seq(finished, done)
        self._finish(finished)
        if self.facade.has_step_observer:
            report = StepReport(
                1, duration, prefill, decode, list(scheduled), list(scheduled.values()), preempted
            )
            self._observe(report)
        if self.lane_on:
            self._lane_join()
        self._sample()

    # -- bookkeeping ----------------------------------------------------------------

    def _finish(self, finished: list[SimRequest]) -> None:
        clock = self.clock
        self.ended = len(finished)
        explicit = self.explicit if self.lane_on else None
        for req in finished:
            self.running.remove(req)
            if explicit is not None and req in explicit:  # else it left the lane finishing
                explicit.remove(req)
            self._free(req, clock)
            rec = req.record
            rec.finish_reason = "length"
            rec.finish_s = clock
            rec.output_tokens = req._num_output_tokens
            if self.facade.has_finish_observer:
                self.facade.request_finished(req, "length", self.view)
            self._left(req)

    def _free(self, req: SimRequest, clock: float) -> None:
        """A finished request gives its blocks back (a disaggregated prefill holds them
        until its KV is sent, ``schedkit.sim.disagg``)."""
        self.kv.release(req.blocks, clock)

    def _observe(self, report: StepReport) -> None:
        self.facade.step_finished(report, self.view)

    def _sample(self) -> None:
        kv = self.kv
        self.recorder.sample(
            self.clock, len(self.waiting), len(self.running), kv.num_used / kv.num_blocks
        )

    def check(self) -> None:
        """Assert KV block conservation and queue consistency (used by tests)."""
        self._check_lane()
        live = (*self.running, *self.waiting, *(req for _, req, _ in self.loading), *self.held)
        self.kv.check([r.blocks for r in live])
        assert all(not r.blocks.nblocks for r in self.waiting), "a waiting request holds blocks"
        assert len(self.running) <= self.cfg.max_num_seqs or self.facade.has_plan


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector.

    A replay allocates many small objects and frees none in cycles; full collections walk
    the whole heap, which would make cost grow faster than linearly with the trace.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
