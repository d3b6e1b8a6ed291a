"""Stretches of identical decode steps, advanced in one go.

When every running request is decoding and nothing waiting could be admitted, the steps
up to the next event (an arrival, a completion, KV blocks running out) are all alike: the
engine advances ``k`` of them at once, with the same outcome as stepping one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedkit.decisions import BatchBudget, StepReport
from schedkit.facade import PolicyFacade
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.kv.blocks import blocks_for
from schedkit.sim.kv.cache import KVCache
from schedkit.sim.lane import DecodeLane, by_seq
from schedkit.sim.recorder import Recorder
from schedkit.sim.request import SimRequest
from schedkit.sim.waiting import FifoWaiting, KeyedWaiting

# An arrival within this many seconds of a step's start is processed before the step (which
# then starts at the arrival). Stretches of decode steps sum their durations in closed form,
# which can differ from adding them one by one in the last bits; the tolerance makes both
# resolve such ties alike.
TIME_EPS = 1e-9


class DecodeStretches:
    """The part of ``SimEngine`` that advances stretches of decode steps."""

    cfg: SimConfig
    cost: StepCost
    facade: PolicyFacade
    kv: KVCache
    recorder: Recorder
    running: list[SimRequest]
    explicit: list[SimRequest]
    lane: DecodeLane
    lane_on: bool
    waiting: FifoWaiting[SimRequest] | KeyedWaiting[SimRequest]
    clock: float
    step_index: int

    if TYPE_CHECKING:

        def _reserve(self, req: SimRequest, cached: int) -> int: ...
        def _finish(self, finished: list[SimRequest]) -> None: ...
        def _observe(self, report: StepReport) -> None: ...
        def _sample(self) -> None: ...
        def _count_decode_run(self, k: int) -> None: ...
        def _lane_join(self) -> None: ...

        cache_window: int
        prefill_interval: int

    def _advance_decode_stretch(self, next_arrival: float, budget: BatchBudget) -> bool:
        """Advance k >= 2 identical pure-decode steps at once, if nothing changes sooner."""
        running, explicit, lane = self.running, self.explicit, self.lane
        if not running:
            return False
        for req in explicit:  # the lane's requests decode
            if req.num_tokens - req._num_computed_tokens != 1 or not req._num_output_tokens:
                return False  # only decoding requests (a last prompt token emits the first)
        n = len(running)
        if n > budget.token_budget:
            return False
        if self.waiting and not self._waiting_blocked(n, budget):
            return False
        k = min(r.record.max_tokens - r._num_output_tokens for r in explicit) if explicit else 0
        if lane.n:
            k = min(k, lane.steps_left()) if explicit else lane.steps_left()
        kv0 = sum(r.num_tokens for r in explicit) + lane.tokens + lane.n
        if next_arrival != float("inf"):
            budget_s = next_arrival - self.clock - TIME_EPS
            k = self.cost.decode_steps_before(n, kv0, budget_s, k)
        free = self.kv.num_free
        need = self._stretch_blocks(k)
        if need > free:
            lo, hi = 0, k  # largest k whose block needs fit
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._stretch_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            need = self._stretch_blocks(k)
        if k < 2:
            return False
        self._decode_stretch(k, kv0, need)
        return True

    def _waiting_blocked(self, n: int, budget: BatchBudget) -> bool:
        """Whether no waiting request can be admitted during the run (in any order)."""
        mixed = self.cfg.mixed_prefill  # else a prefill step has the whole budget
        if not mixed:
            n = 0
        if len(self.running) >= budget.max_running or budget.token_budget <= n:
            return True
        # any of them could be first (a list hook's order, or vLLM's cache-aware window);
        # keyed, the head is
        if self.facade.has_order_list or self.cache_window:
            return False
        head, bs = self.waiting[0], self.cfg.block_size
        hit, own, reclaim = self.kv.lookup(head.blocks, head.num_tokens)
        computed = (hit + own) * bs
        num_new = min(head.num_tokens - computed, budget.token_budget - n)
        if budget.prefill_chunk:
            num_new = min(num_new, budget.prefill_chunk)
        need = blocks_for(computed + num_new, bs) - hit - own
        need = max(need, self._reserve(head, hit + own))
        if mixed:  # the decodes grow in the same step
            need += self._stretch_blocks(1)
        # Decoding only shrinks the free pool, so a head that does not fit now never will.
        return not self.kv.can_allocate(reclaim + own, need)

    def _stretch_blocks(self, k: int) -> int:
        """New blocks the running requests need to decode ``k`` more tokens each."""
        need = _blocks_needed(self.explicit, k, self.cfg.block_size)
        return need + self.lane.blocks_needed(k) if self.lane.n else need

    def _decode_stretch(self, k: int, kv0: int, need: int) -> None:
        """Advance ``k`` decode steps; ``need`` is the new blocks they take (checked to fit)."""
        running, kv, bs = self.running, self.kv, self.cfg.block_size
        n = len(running)
        duration = self.cost.decode_run_time(n, kv0, k)
        used_before = kv.num_used
        kv.take(need)
        clock = self.clock + duration
        caching = self.cfg.enable_prefix_caching
        finished = []
        for req in self.explicit:  # the lane's requests advance together, below
            before, table = req._num_computed_tokens, req.blocks
            grow = blocks_for(before + k, bs) - table.nblocks
            if grow > 0:
                kv.add_blocks(table, grow)
            req._num_computed_tokens = after = before + k
            if caching and after // bs > before // bs:
                kv.publish(table, before // bs, after // bs)
            req._num_output_tokens += k
            req.num_tokens += k
            req.last_token_s = clock
            if req._num_output_tokens >= req.record.max_tokens:
                finished.append(req)
        if self.lane.n:
            done = self.lane.advance(k, clock)
            if done:
                finished = by_seq(finished, done)
        self.recorder.token_gap(duration / k, n * k)
        self.recorder.kv_usage(duration, (used_before + kv.num_used) / 2 / kv.num_blocks)
        self.clock = clock
        self.step_index += k
        if self.prefill_interval > 1:
            self._count_decode_run(k)
        report = None
        if self.facade.has_step_observer:  # before _finish takes finished ones out of running
            report = StepReport(k, duration, 0, n * k, list(running), [k] * n, ())
        self._finish(finished)
        if report is not None:
            self._observe(report)
        if self.lane_on:
            self._lane_join()
        self._sample()


def _blocks_needed(running: list[SimRequest], k: int, bs: int) -> int:
    """New blocks the running requests need to decode ``k`` more tokens each."""
    total = 0
    for r in running:
        extra = -(-(r._num_computed_tokens + k) // bs) - r.blocks.nblocks  # blocks_for, inline
        if extra > 0:
            total += extra
    return total
