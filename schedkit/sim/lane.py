"""The decode lane: running requests that decode one token every step, advanced together.

Under load most of a batch is requests decoding one token a step, and a step's work on
each is the same: one more computed and output token, a gap since its last token, a new
KV block every ``block_size`` tokens, a check for its last token. The lane keeps those
requests' state relative to a counter of the steps they all ran (``steps``): a member's
slots hold its state when it joined (or was last brought up to date), and

    computed tokens = its slot + lane.steps - its ``_lane_base``

(output tokens and tokens alike), its blocks are ``ceil(computed / block_size)``, its
last token came at ``lane.last_token_s``. A step then costs the same however many
requests decode: the cost model takes the lane's sums, the members growing a block this
step are counted by phase (the step, modulo the block size, at which a member's
computed tokens fill its last block), and the ones finishing are listed by the lane step
they finish at. A member is brought up to date (``sync``) before anything reads its
slots; its ``RequestView`` properties read through the lane.

The engine (``schedkit.sim.engine``) keeps a step that the lane cannot take as it is,
one token for every member, within the token budget and the free blocks, for its
step-by-step code, after ``flush`` has brought every member up to date and out: the
decisions are the same either way.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from schedkit.sim.cadence import in_prefill

if TYPE_CHECKING:
    from schedkit.facade import PolicyFacade
    from schedkit.sim.config import SimConfig
    from schedkit.sim.kv.cache import KVCache
    from schedkit.sim.kv.host import HostTier
    from schedkit.sim.request import SimRequest

__all__ = ["DecodeLane", "LaneSteps", "by_seq"]

# what the lane plans for a step: each request outside it scheduled, its tokens and the
# blocks it takes
Plan = list[tuple["SimRequest", int, int]]


class DecodeLane:
    """The requests decoding in step, and their sums (see the module's docstring)."""

    __slots__ = ("block_size", "caching", "ends", "finish_heap", "last_token_s", "n", "phases",
                 "seqs", "steps", "tokens")  # fmt: skip

    def __init__(self, block_size: int, caching: bool) -> None:
        self.block_size = block_size
        self.caching = caching  # own blocks are published as they fill
        self.steps = 0  # steps the lane ran: every member decoded one token in each
        self.last_token_s = 0.0  # when every member's last token came
        self.n = 0  # members
        self.tokens = 0  # members' computed tokens, summed
        self.seqs: list[int] = []  # members' seqs: their running order
        # member seqs (running order) by phase: those growing a block on lane step s
        # are phases[s % block_size]
        self.phases: list[list[int]] = [[] for _ in range(block_size)]
        self.ends: dict[int, list[SimRequest]] = {}  # lane step -> members done after it
        self.finish_heap: list[int] = []  # the keys of ``ends``

    # -- members ------------------------------------------------------------------------

    def can_join(self, req: SimRequest) -> bool:
        """Whether ``req`` (running, up to date) decodes in step with the members: one
        token left to compute, output emitted, its blocks exactly its tokens', its last
        token at the lane's."""
        computed = req._num_computed_tokens
        return (
            req.num_tokens - computed == 1
            and req._num_output_tokens > 0
            and req.blocks.nblocks == -(-computed // self.block_size)
            and (not self.n or req.last_token_s == self.last_token_s)
        )

    def join(self, req: SimRequest) -> None:
        """``req`` (``can_join``) becomes a member."""
        if not self.n:
            self.last_token_s = req.last_token_s
        computed, bs, steps = req._num_computed_tokens, self.block_size, self.steps
        req._lane = self
        req._lane_base = steps
        # it needs a block on the lane step at which its computed tokens fill its blocks
        phase = req._lane_phase = (steps - computed) % bs
        insort(self.phases[phase], req._seq)
        insort(self.seqs, req._seq)
        end = steps + req.record.max_tokens - req._num_output_tokens
        bucket = self.ends.get(end)
        if bucket is None:
            self.ends[end] = [req]
            heapq.heappush(self.finish_heap, end)
        else:
            bucket.append(req)
        table = req.blocks
        # its own blocks are published as they fill; count them where they follow on
        req._lane_own = self.caching and table.own_cached == computed // bs - table.num_shared
        self.tokens += computed
        self.n += 1

    def sync(self, req: SimRequest) -> None:
        """Bring member ``req``'s slots up to date (it stays a member)."""
        ran = self.steps - req._lane_base
        req.last_token_s = self.last_token_s
        if not ran:
            return
        req._lane_base = self.steps
        computed = req._num_computed_tokens + ran
        req._num_computed_tokens = computed
        req._num_output_tokens += ran
        req.num_tokens += ran
        table = req.blocks
        table.nblocks = -(-computed // self.block_size)
        if req._lane_own:
            table.own_cached = computed // self.block_size - table.num_shared

    def flush(self, running: list[SimRequest]) -> None:
        """Every member (in ``running``) up to date and out of the lane."""
        for req in running:
            if req._lane is not None:
                self.sync(req)
                req._lane = None
        self.n = self.tokens = 0
        self.seqs = []
        self.phases = [[] for _ in range(self.block_size)]
        self.ends.clear()
        self.finish_heap.clear()

    def _leave(self, req: SimRequest) -> None:
        """Member ``req``, whose ``ends`` bucket the caller took, up to date and out."""
        self.sync(req)
        req._lane = None
        phase, seqs = self.phases[req._lane_phase], self.seqs
        del phase[bisect_left(phase, req._seq)]
        del seqs[bisect_left(seqs, req._seq)]
        self.tokens -= req._num_computed_tokens
        self.n -= 1

    # -- steps --------------------------------------------------------------------------

    def growing(self) -> list[int]:
        """Seqs, in running order, of the members needing a block this step."""
        return self.phases[self.steps % self.block_size]

    def blocks_needed(self, k: int) -> int:
        """New blocks the members need to decode ``k`` more tokens each."""
        full, rest = divmod(k, self.block_size)
        total = self.n * full
        steps, bs, phases = self.steps, self.block_size, self.phases
        for j in range(rest):
            total += len(phases[(steps + j) % bs])
        return total

    def steps_left(self) -> int:
        """Steps until the first member emits its last token."""
        return self.finish_heap[0] - self.steps

    def advance(self, k: int, clock: float) -> list[SimRequest]:
        """Every member decoded ``k`` tokens, the last at ``clock`` (``k`` <= ``steps_left``):
        the members that are done, up to date and out of the lane, in running order."""
        self.steps += k
        self.tokens += self.n * k
        self.last_token_s = clock
        heap = self.finish_heap
        if not heap or heap[0] > self.steps:
            return []
        done = self.ends.pop(heapq.heappop(heap))
        for req in done:
            self._leave(req)
        if len(done) > 1:
            done.sort(key=_seq)
        return done


def _seq(req: SimRequest) -> int:
    return req._seq


def by_seq(first: list[SimRequest], second: list[SimRequest]) -> list[SimRequest]:
    """Two lists of running requests, each in running order, as one in running order."""
    if not first:
        return second
    return sorted(first + second, key=_seq)


class LaneSteps:
    """The part of ``SimEngine`` that steps with its decode lane."""

    if TYPE_CHECKING:
        cfg: SimConfig
        facade: PolicyFacade
        host: HostTier | None
        kv: KVCache
        running: list[SimRequest]

        def _publish(self, req: SimRequest, num_new: int) -> None: ...

    def _init_lane(self, on: bool) -> None:
        """The lane, on unless asked otherwise, where a host tier is written step by step
        or a policy reads step reports (each shows every request in the step's batch)."""
        cfg, facade = self.cfg, self.facade
        self.lane = DecodeLane(cfg.block_size, cfg.enable_prefix_caching)
        self.lane_on = on and self.host is None and "on_step_finished" not in facade.implemented
        # the running requests outside the lane, in running order (all of them without one)
        self.explicit: list[SimRequest] = [] if self.lane_on else self.running
        # a lane's blocks may be taken at once where eviction is LRU order (or none)
        self.lane_bulk = self.kv.keyed is None and not facade.has_evictions
        self.admissions = 0  # requests that joined the running batch, counted (``_seq``)

    def _lane_plan(self, token_budget: int, chunk: int, skip_chunks: bool) -> Plan | None:
        """What a step schedules outside the lane, where the lane can take the step (the
        token budget reaches every lane request, and the free blocks every request, so
        none is preempted); else None. Nothing changes."""
        lane, bs = self.lane, self.cfg.block_size
        seqs, used, blocks = lane.seqs, 0, len(lane.growing())
        plan: Plan = []
        for req in self.explicit:  # in running order, lane requests between them
            if skip_chunks and in_prefill(req):
                continue
            left = token_budget - bisect_left(seqs, req._seq) - used
            if left <= 0:
                break  # the budget ran out: no request after it runs
            computed = req._num_computed_tokens
            num_new = req.num_tokens - computed
            if chunk and num_new > chunk:
                num_new = chunk
            if num_new > left:
                num_new = left
            need = -(-(computed + num_new) // bs) - req.blocks.nblocks
            if need < 0:
                need = 0
            plan.append((req, num_new, need))
            used += num_new
            blocks += need
        if lane.n + used > token_budget or not self.kv.can_allocate(0, blocks):
            return None
        return plan

    def _lane_schedule(
        self, plan: Plan, scheduled: dict[SimRequest, int], token_budget: int, cadence: bool
    ) -> tuple[int, bool]:
        """Schedule ``plan`` and the lane, in running order as the step-by-step code
        does (blocks are taken in that order): the token budget left, and whether the
        step carries prefill."""
        kv, bs, caching = self.kv, self.cfg.block_size, self.cfg.enable_prefix_caching
        growing = self.lane.growing()
        taken = 0
        prefill = False
        for req, num_new, need in plan:
            if growing:  # lane requests before it take their blocks first
                before = bisect_left(growing, req._seq)
                if before > taken:
                    self._lane_take(before - taken)
                    taken = before
            if need:
                kv.take(need)
                kv.add_blocks(req.blocks, need)
            scheduled[req] = num_new
            computed = req._num_computed_tokens
            if caching and (computed + num_new) // bs > computed // bs:
                self._publish(req, num_new)
            token_budget -= num_new
            if cadence and not prefill:
                prefill = in_prefill(req)
        if len(growing) > taken:
            self._lane_take(len(growing) - taken)
        return token_budget - self.lane.n, prefill

    def _lane_take(self, count: int) -> None:
        """``count`` lane requests take a block each, as many calls as the step-by-step
        code makes unless eviction is in LRU order (where one call does the same)."""
        if self.lane_bulk:
            self.kv.take(count)
            return
        for _ in range(count):
            self.kv.take(1)

    def _flush_lane(self) -> None:
        """Every lane request up to date and back outside it."""
        self.lane.flush(self.running)
        self.explicit = list(self.running)

    def _lane_join(self) -> None:
        """Requests outside the lane that now decode in step with it join it."""
        lane, kept = self.lane, []
        for req in self.explicit:
            if lane.can_join(req):
                lane.join(req)
            else:
                kept.append(req)
        if len(kept) < len(self.explicit):
            self.explicit = kept

    def _any_decoding(self) -> bool:
        """Whether a running request decodes (``in_prefill``'s complement)."""
        return self.lane.n > 0 or not all(in_prefill(r) for r in self.explicit)

    def _check_lane(self) -> None:
        """Bring the lane's requests up to date and assert its sums (tests)."""
        lane = self.lane
        members = [r for r in self.running if r._lane is not None]
        for req in members:
            lane.sync(req)
        assert len(members) == lane.n, "the lane's count"
        assert lane.tokens == sum(r._num_computed_tokens for r in members), "the lane's tokens"
        outside = [r for r in self.running if r._lane is None]
        assert self.explicit == outside or self.explicit is self.running, "outside the lane"
