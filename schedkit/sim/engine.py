"""Discrete-event, continuous-batching engine with vLLM V1's scheduling semantics.

Each step schedules running requests first (decode, or the next prefill chunk), then
admits waiting ones, under a token budget and a cap on running requests; when KV blocks
run out, running requests are preempted by recompute. Step durations come from a cost
model. Arrivals are processed in trace order before the step that starts at or after
them, so a seed and a trace give one event order and one result.

Cost grows with events, not decode steps: when every running request is decoding and
nothing waiting could be admitted, the run of identical steps up to the next event (an
arrival, a completion, KV blocks running out) is advanced in one go, with the same
outcome as stepping one by one (``stretch=False`` does that, for tests).
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from schedkit.bench.records import RunResult
from schedkit.decisions import BatchBudget, StepReport
from schedkit.facade import PolicyFacade
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.kvcache import KVCache
from schedkit.sim.recorder import Recorder
from schedkit.sim.request import SimRequest, TraceLike
from schedkit.views import EngineState

__all__ = ["SimConfig", "SimEngine", "StepCost", "no_cyclic_gc"]

# An arrival within this many seconds of a step's start is processed before the step (which
# then starts at the arrival). Runs
# of decode steps sum their durations in closed form, which can differ from adding them one
# by one in the last bits; the tolerance makes both resolve such ties alike.
TIME_EPS = 1e-9


class SimEngine:
    """Replays requests through the selected policies; ``run()`` returns a RunResult."""

    def __init__(
        self,
        requests: Iterable[TraceLike],
        cost: StepCost,
        config: SimConfig,
        facade: PolicyFacade,
        *,
        stretch: bool = True,
        check_invariants: bool = False,
    ) -> None:
        self.cfg = config
        self.cost = cost
        self.facade = facade
        self.stretch = stretch
        self.check_invariants = check_invariants
        self.view = EngineState(config.num_blocks, config.block_size)
        self.kv = KVCache(
            config.num_blocks,
            config.block_size,
            prefix_caching=config.enable_prefix_caching,
            facade=facade,
            engine=self.view,
            eviction_window=config.eviction_window,
        )
        self.pending = [
            SimRequest.from_trace(i, r, config.block_size, config.hash_block_tokens)
            for i, r in enumerate(requests)
        ]
        self.pending.sort(key=lambda r: r.arrival_time)  # stable: trace order breaks ties
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
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
        pending, nxt, view = self.pending, 0, self.view
        while nxt < len(pending) or self.running or self.waiting:
            if not self.running and not self.waiting and view.clock < pending[nxt].arrival_time:
                view.clock = pending[nxt].arrival_time
            while nxt < len(pending) and pending[nxt].arrival_time <= view.clock + TIME_EPS:
                view.clock = max(view.clock, pending[nxt].arrival_time)  # never before arrival
                self._arrive(pending[nxt])
                nxt += 1
            if not self.running and not self.waiting:
                continue
            next_arrival = pending[nxt].arrival_time if nxt < len(pending) else float("inf")
            budget = self._budget()
            if not (self.stretch and self._advance_decode_run(next_arrival, budget)):
                self._step(budget)
            if self.check_invariants:
                self.check()
        return self.recorder.finish(view.clock, view.step_index, self.facade, started)

    def _arrive(self, req: SimRequest) -> None:
        view = self.view
        view.num_waiting = len(self.waiting)
        view.num_running = len(self.running)
        view.kv_blocks_free = self.kv.num_free
        need = -(-(req.num_prompt_tokens + req.max_tokens) // self.cfg.block_size)
        if need > self.cfg.num_blocks:
            self._reject(
                req, f"prompt + max_tokens need {need} KV blocks, capacity is {self.cfg.num_blocks}"
            )
            return
        if self.cfg.enable_prefix_caching:
            req.block_hashes = req.hash_blocks(self.cfg.block_size)
        decision = self.facade.admit(req, view)
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
        req.block_hashes = ()

    # -- one step -------------------------------------------------------------------

    def _budget(self) -> BatchBudget:
        view = self.view
        view.num_waiting = len(self.waiting)
        view.num_running = len(self.running)
        view.kv_blocks_free = self.kv.num_free
        return self.facade.plan_batch(view, self.default_budget)

    def _step(self, budget: BatchBudget) -> None:
        token_budget = budget.token_budget
        chunk = budget.prefill_chunk
        scheduled: dict[SimRequest, int] = {}
        preempted: list[SimRequest] = []
        running = self.running
        i = 0
        while i < len(running) and token_budget > 0:
            req = running[i]
            num_new = req.num_tokens - req.num_computed_tokens
            if chunk and num_new > chunk:
                num_new = chunk
            num_new = min(num_new, token_budget)
            fits = True
            victims: list[SimRequest] | None = None
            while not self._grow(req, num_new):
                if victims is None:
                    victims = self._policy_victims(req)
                victim = self._next_victim(victims)
                if victim in scheduled:
                    token_budget += scheduled.pop(victim)
                    i -= 1
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    fits = False
                    break
            if not fits:
                break
            scheduled[req] = num_new
            self._publish(req, num_new)
            token_budget -= num_new
            i += 1
        if not preempted:
            self._admit_waiting(scheduled, token_budget, budget, chunk)
        self._execute(scheduled, preempted)

    def _admit_waiting(
        self, scheduled: dict[SimRequest, int], token_budget: int, budget: BatchBudget, chunk: int
    ) -> None:
        waiting, running, kv, view = self.waiting, self.running, self.kv, self.view
        if self.facade.has_order and waiting:
            view.num_running = len(running)
            view.kv_blocks_free = kv.num_free
            order = self.facade.order_waiting(list(waiting), view)
            if order is not None:
                waiting.clear()
                waiting.extend(order)  # type: ignore[arg-type]
        while waiting and token_budget > 0 and len(running) < budget.max_running:
            req = waiting[0]
            hit, own = req.cached_prefix(kv)
            computed = (len(hit) + own) * self.cfg.block_size
            num_new = req.num_tokens - computed
            if chunk and num_new > chunk:
                num_new = chunk
            num_new = min(num_new, token_budget)
            need = -(-(computed + num_new) // self.cfg.block_size) - len(hit) - own
            if not kv.can_allocate(hit, own, max(need, self._reserve(req, hit, own))):
                break
            waiting.popleft()
            self._admit(req, hit, own, computed, need)
            running.append(req)
            scheduled[req] = num_new
            self._publish(req, num_new)
            token_budget -= num_new

    def _admit(
        self, req: SimRequest, hit: tuple[int, ...], own: int, computed: int, need: int
    ) -> None:
        clock = self.view.clock
        if hit or own:
            self.kv.touch(hit, req.run_key, own, clock)
            req.shared.extend(hit)
            req.own_cached = own
            req.nblocks = len(hit) + own
        self.kv.take(need)
        req.add_blocks(need)
        req.num_computed_tokens = computed
        res, rec = self.result, req.record
        if req.num_preemptions == 0:
            res.prefix_query_tokens += req.num_tokens
            res.prefix_hit_tokens += computed
        if rec.scheduled_s is None:
            rec.scheduled_s = clock
            rec.cached_tokens = req.num_cached_tokens = computed
        if req.lost_tokens:
            redone = max(0, req.lost_tokens - computed)
            res.recomputed_tokens += redone
            rec.recomputed_tokens += redone
            req.lost_tokens = 0

    def _reserve(self, req: SimRequest, hit: tuple[int, ...], own: int) -> int:
        """Blocks a waiting request must find free to be admitted: its whole sequence when
        ``reserve_full_prompt`` (vLLM's scheduler_reserve_full_isl), else nothing extra."""
        if not self.cfg.reserve_full_prompt:
            return 0
        return -(-req.num_tokens // self.cfg.block_size) - len(hit) - own

    def _publish(self, req: SimRequest, num_new: int) -> None:
        """Cache the blocks this step fills, at scheduling time as vLLM does, so a request
        admitted later in the same step already hits them."""
        if self.cfg.enable_prefix_caching:
            bs, before = self.cfg.block_size, req.num_computed_tokens
            if (before + num_new) // bs > before // bs:
                req.publish_blocks(self.kv, before // bs, (before + num_new) // bs, self.view.clock)

    def _grow(self, req: SimRequest, num_new: int) -> bool:
        """Give a running request the blocks for ``num_new`` more tokens, if they fit."""
        need = -(-(req.num_computed_tokens + num_new) // self.cfg.block_size) - req.nblocks
        if need <= 0:
            return True
        if not self.kv.can_allocate((), 0, need):
            return False
        self.kv.take(need)
        req.add_blocks(need)
        return True

    def _policy_victims(self, needing: SimRequest) -> list[SimRequest]:
        """The policy's victim order for ``needing``, reversed so pop() takes the next."""
        if not self.facade.has_victims:
            return []
        self._sync_counts()
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
        req.release(self.kv, self.view.clock)
        req.lost_tokens = req.num_computed_tokens
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.record.preemptions += 1
        self.result.preemptions += 1
        if self.cfg.enable_prefix_caching:  # its output is prompt now, cached in its own run
            req.block_hashes = req.hash_blocks(self.cfg.block_size)
        self.waiting.appendleft(req)

    def _execute(self, scheduled: dict[SimRequest, int], preempted: list[SimRequest]) -> None:
        prefill = decode = kv_tokens = attn = 0
        for req, n in scheduled.items():
            c = req.num_computed_tokens
            if n == 1 and c == req.num_tokens - 1:
                decode += 1
                attn += c + 1
            else:
                prefill += n
                attn += n * c + n * (n + 1) // 2
            kv_tokens += c + n
        duration = self.cost.step_time(prefill, decode, kv_tokens, attn) if scheduled else 0.0
        if not scheduled and not preempted:
            raise RuntimeError(
                f"simulator made no progress at t={self.view.clock}: {self.running=}"
            )
        self.recorder.kv_usage(duration, self.kv.num_used / self.kv.num_blocks)
        view = self.view
        view.clock += duration
        view.step_index += 1
        clock, gap = view.clock, self.recorder.token_gap
        finished = []
        for req, n in scheduled.items():
            req.num_computed_tokens = after = req.num_computed_tokens + n
            if after == req.num_tokens:
                if req.record.first_token_s is None:
                    req.record.first_token_s = clock
                else:
                    gap(clock - req.last_token_s, 1)
                req.last_token_s = clock
                req.num_output_tokens += 1
                req.num_tokens += 1
                if req.num_output_tokens >= req.max_tokens:
                    finished.append(req)
        self._finish(finished)
        if self.facade.has_step_observer:
            report = StepReport(
                1, duration, prefill, decode, list(scheduled), list(scheduled.values()), preempted
            )
            self._observe(report)
        self._sample()

    # -- runs of identical decode steps ---------------------------------------------

    def _advance_decode_run(self, next_arrival: float, budget: BatchBudget) -> bool:
        """Advance k >= 2 identical pure-decode steps at once, if nothing changes sooner."""
        running, bs = self.running, self.cfg.block_size
        if not running:
            return False
        for req in running:
            if req.num_tokens - req.num_computed_tokens != 1 or not req.num_output_tokens:
                return False  # only decoding requests (a last prompt token emits the first)
        n = len(running)
        if n > budget.token_budget:
            return False
        if self.waiting and not self._waiting_blocked(n, budget):
            return False
        k = min(r.max_tokens - r.num_output_tokens for r in running)
        kv0 = sum(r.num_tokens for r in running)
        if next_arrival != float("inf"):
            budget_s = next_arrival - self.view.clock - TIME_EPS
            k = self.cost.decode_steps_before(n, kv0, budget_s, k)
        free = self.kv.num_free
        need = _blocks_needed(running, k, bs)
        if need > free:
            lo, hi = 0, k  # largest k whose block needs fit
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _blocks_needed(running, mid, bs) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            need = _blocks_needed(running, k, bs)
        if k < 2:
            return False
        self._run_decode_steps(k, kv0, need)
        return True

    def _waiting_blocked(self, n: int, budget: BatchBudget) -> bool:
        """Whether no waiting request can be admitted during the run (in any order)."""
        if len(self.running) >= budget.max_running or budget.token_budget <= n:
            return True
        if self.facade.has_order:
            return False
        head = self.waiting[0]
        hit, own = head.cached_prefix(self.kv)
        computed = (len(hit) + own) * self.cfg.block_size
        num_new = min(head.num_tokens - computed, budget.token_budget - n)
        if budget.prefill_chunk:
            num_new = min(num_new, budget.prefill_chunk)
        need = -(-(computed + num_new) // self.cfg.block_size) - len(hit) - own
        need = max(need, self._reserve(head, hit, own))
        need += _blocks_needed(self.running, 1, self.cfg.block_size)
        # Decoding only shrinks the free pool, so a head that does not fit now never will.
        return not self.kv.can_allocate(hit, own, need)

    def _run_decode_steps(self, k: int, kv0: int, need: int) -> None:
        """Advance ``k`` decode steps; ``need`` is the new blocks they take (checked to fit)."""
        running, kv, view, bs = self.running, self.kv, self.view, self.cfg.block_size
        n = len(running)
        duration = self.cost.decode_run_time(n, kv0, k)
        used_before = kv.num_used
        kv.take(need)
        clock = view.clock + duration
        caching = self.cfg.enable_prefix_caching
        finished = []
        for req in running:
            before = req.num_computed_tokens
            grow = -(-(before + k) // bs) - req.nblocks
            if grow > 0:
                req.add_blocks(grow)
            req.num_computed_tokens = after = before + k
            if caching and after // bs > before // bs:
                req.publish_blocks(kv, before // bs, after // bs, clock)
            req.num_output_tokens += k
            req.num_tokens += k
            req.last_token_s = clock
            if req.num_output_tokens >= req.max_tokens:
                finished.append(req)
        self.recorder.token_gap(duration / k, n * k)
        self.recorder.kv_usage(duration, (used_before + kv.num_used) / 2 / kv.num_blocks)
        view.clock = clock
        view.step_index += k
        report = None
        if self.facade.has_step_observer:  # before _finish takes finished ones out of running
            report = StepReport(k, duration, 0, n * k, list(running), [k] * n, ())
        self._finish(finished)
        if report is not None:
            self._observe(report)
        self._sample()

    # -- bookkeeping ----------------------------------------------------------------

    def _finish(self, finished: list[SimRequest]) -> None:
        clock = self.view.clock
        for req in finished:
            self.running.remove(req)
            req.release(self.kv, clock)
            req.hashes = None  # finished: never looked up again
            rec = req.record
            rec.finish_reason = "length"
            rec.finish_s = clock
            rec.output_tokens = req.num_output_tokens
            if self.facade.has_finish_observer:
                self._sync_counts()
                self.facade.request_finished(req, "length", self.view)
            req.block_hashes = ()

    def _observe(self, report: StepReport) -> None:
        self._sync_counts()
        self.facade.step_finished(report, self.view)

    def _sync_counts(self) -> None:
        view = self.view
        view.num_running = len(self.running)
        view.num_waiting = len(self.waiting)
        view.kv_blocks_free = self.kv.num_free

    def _sample(self) -> None:
        kv = self.kv
        self.recorder.sample(
            self.view.clock, len(self.waiting), len(self.running), kv.num_used / kv.num_blocks
        )

    def check(self) -> None:
        """Assert KV block conservation and queue consistency (used by tests)."""
        live = (*self.running, *self.waiting)
        self.kv.check(sum(r.private_blocks for r in live))
        refs: dict[int, int] = {}
        for r in live:
            assert len(r.shared) == min(r.nblocks, r.num_shared)
            for b in r.shared:
                if b is not None:
                    refs[b] = refs.get(b, 0) + 1
        assert refs == self.kv.in_use, "block refcounts diverge from request block lists"
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


def _blocks_needed(running: list[SimRequest], k: int, bs: int) -> int:
    """New blocks the running requests need to decode ``k`` more tokens each."""
    total = 0
    for r in running:
        extra = -(-(r.num_computed_tokens + k) // bs) - r.nblocks
        if extra > 0:
            total += extra
    return total
