"""A stateful sequence on a small engine: arrivals, steps, preemptions, evictions, finishes."""

from __future__ import annotations

import math
import random
from typing import Any

from schedkit.decisions import BatchBudget, StepReport
from schedkit.testing._strategies import _PREFIXES, _TENANTS, _request_hashes
from schedkit.testing._subject import ConformanceError, _normalize, _Subject
from schedkit.views import BlockState, EngineState, RequestState

SEQUENCE_ACTIONS = 300
"""Arrivals, steps and aborts in the stateful sequence."""


def _check_sequence(subject: _Subject) -> None:
    first = _MiniEngine(subject, subject.seed).run(SEQUENCE_ACTIONS)
    second = _MiniEngine(subject, subject.seed).run(SEQUENCE_ACTIONS)
    for a, b in zip(first, second, strict=False):
        if a != b:
            raise ConformanceError(
                f"policy {subject.name!r} is not deterministic: in the stateful sequence,"
                f" action {a[0]}, hook {a[1]}, two fresh instances answered {a[2]!r} and"
                f" {b[2]!r} after identical histories\n"
                f"reproduce with check_policy(..., seed={subject.seed})"
            )


class _MiniEngine:
    """Plausible state transitions between hook calls; no cost model, no timing."""

    def __init__(self, subject: _Subject, seed: int) -> None:
        self.subject = subject
        self.facade = subject.facade()
        self.rng = random.Random(seed)
        self.engine = EngineState(self.rng.choice((16, 32, 64)), block_size=16)
        self.default = BatchBudget(
            self.rng.choice((64, 256, 2048)), self.rng.choice((4, 16, 64)), self.rng.choice((0, 48))
        )
        self.waiting: list[RequestState] = []
        self.running: list[RequestState] = []
        self.cached: list[BlockState] = []  # free but holding a prefix, LRU first
        self.held: dict[str, int] = {}  # blocks per running request
        self.trace: list[tuple[int, str, object]] = []
        self.action = 0
        self.created = 0

    def run(self, actions: int) -> list[tuple[int, str, object]]:
        for action in range(actions):
            self.action = action
            roll = self.rng.random()
            if roll < 0.3:
                self.arrive()
            elif roll < 0.92:
                self.step()
            else:
                self.abort()
        return self.trace

    def call(self, hook: str, *args: Any) -> Any:
        self.engine.num_running = len(self.running)
        self.engine.num_waiting = len(self.waiting)
        where = f" (stateful sequence, action {self.action})"
        result = self.subject.invoke(self.facade, hook, args, where=where)
        self.trace.append((self.action, hook, _normalize(result)))
        return result

    def arrive(self) -> None:
        rng, engine = self.rng, self.engine
        engine.clock += rng.choice((0.0, 0.01, 0.1))  # 0.0: simultaneous arrivals
        request_id, prompt = f"req-{self.created}", rng.randint(1, 120)
        # at most 15 blocks with the output: fits the smallest KV
        num_blocks, prefix = prompt // 16, rng.randrange(_PREFIXES)
        hashes = _request_hashes(request_id, num_blocks, prefix, rng.randint(0, num_blocks))
        request = RequestState(
            request_id,
            prompt,
            rng.randint(1, 120),
            arrival_time=engine.clock,
            tenant=rng.choice(_TENANTS),
            priority=rng.randint(0, 3),
            slo_ttft_ms=rng.choice((None, 500.0, 2000.0)),
            slo_tpot_ms=rng.choice((None, 50.0)),
            block_hashes=tuple(hashes),
        )
        self.created += 1
        if self.call("admit_request", request, engine).admitted:
            self.waiting.append(request)
        else:
            self.call("on_request_finished", request, "rejected", engine)

    def step(self) -> None:
        engine = self.engine
        engine.clock += self.rng.choice((0.005, 0.02, 0.05))
        budget: BatchBudget = self.call("plan_batch", engine, self.default)
        if self.waiting:
            order = self.call("order_waiting", self.waiting, engine)
            if order is not None:
                self.waiting[:] = order
        tokens = budget.token_budget
        scheduled: list[tuple[RequestState, int, bool]] = []
        preempted: list[RequestState] = []
        for request in list(self.running):
            if tokens <= 0:
                break
            if request not in self.running:  # preempted for another one
                continue
            n, decoding = self.chunk(request, tokens, budget)
            if self.make_room(request, n, preempted):
                scheduled.append((request, n, decoding))
                tokens -= n
        while not preempted and self.waiting and tokens > 0:
            if len(self.running) >= budget.max_running:
                break
            request = self.waiting[0]
            n, decoding = self.chunk(request, tokens, budget)
            blocks = math.ceil((request.num_computed_tokens + n) / 16)
            if not self.allocate(blocks):
                break
            self.running.append(self.waiting.pop(0))
            self.held[request.request_id] = blocks
            scheduled.append((request, n, decoding))
            tokens -= n
            self.hit(request)
        for request, n, _ in scheduled:
            request.num_computed_tokens += n
            if request.num_computed_tokens == request.num_prompt_tokens + request.num_output_tokens:
                request.num_output_tokens += 1  # the step samples a token
        engine.step_index += 1
        decode = sum(n for _, n, decoding in scheduled if decoding)
        report = StepReport(
            num_steps=1,
            duration_s=0.01,
            num_prefill_tokens=sum(n for _, n, _ in scheduled) - decode,
            num_decode_tokens=decode,
            scheduled=tuple(r for r, _, _ in scheduled),
            num_scheduled_tokens=tuple(n for _, n, _ in scheduled),
            preempted=tuple(preempted),
        )
        self.call("on_step_finished", report, engine)
        for request in list(self.running):
            if request.num_output_tokens >= request.max_tokens:
                self.finish(request, "length")
            elif request.num_output_tokens and self.rng.random() < 0.02:
                self.finish(request, "stop")

    def chunk(self, request: RequestState, tokens: int, budget: BatchBudget) -> tuple[int, bool]:
        """Tokens to compute this step (the rest of the prompt and output so far), decoding?"""
        left = request.num_prompt_tokens + request.num_output_tokens - request.num_computed_tokens
        decoding = left == 1 and request.num_output_tokens > 0
        if not decoding and budget.prefill_chunk:
            left = min(left, budget.prefill_chunk)
        return min(left, tokens), decoding

    def make_room(self, request: RequestState, n: int, preempted: list[RequestState]) -> bool:
        blocks = math.ceil((request.num_computed_tokens + n) / 16) - self.held[request.request_id]
        if not self.allocate(blocks):
            victims = self.call("select_victims", self.running, request, self.engine)
            # the policy's victims in order, then the default: last admitted first
            for victim in [*(victims or []), *reversed(self.running)]:
                if victim not in self.running:
                    continue
                self.release(victim)
                victim.num_computed_tokens = 0
                victim.num_preemptions += 1
                self.waiting.insert(0, victim)
                preempted.append(victim)
                if victim is request:
                    return False
                if self.allocate(blocks):
                    break
            else:
                return False
        self.held[request.request_id] += blocks
        return True

    def allocate(self, blocks: int) -> bool:
        engine = self.engine
        if blocks > engine.kv_blocks_free:
            return False
        fresh = engine.kv_blocks_free - len(self.cached)
        if blocks > fresh:
            engine.kv_blocks_free -= fresh  # never-cached blocks go first
            needed = blocks - fresh
            chosen = self.call("select_evictions", self.cached, needed, engine)
            for block in (chosen if chosen is not None else list(self.cached))[:needed]:
                self.cached.remove(block)
            blocks = needed
        engine.kv_blocks_free -= blocks
        return True

    def release(self, request: RequestState) -> int:
        self.running.remove(request)
        freed = self.held.pop(request.request_id)
        self.engine.kv_blocks_free += freed
        return freed

    def hit(self, request: RequestState) -> None:
        """Prefix-cache hits: the cached blocks that start the request's prompt."""
        cached = {block.block_hash: block for block in self.cached}
        for block_hash in request.block_hashes:
            block = cached.get(block_hash)
            if block is None:
                break
            block.num_hits += 1
            block.last_access = self.engine.clock
            self.cached.remove(block)
            self.cached.append(block)

    def finish(self, request: RequestState, reason: str) -> None:
        freed = self.release(request)
        cached = {block.block_hash for block in self.cached}
        for depth, block_hash in enumerate(request.block_hashes[:freed]):
            if block_hash not in cached:  # one copy per hash, as in a real prefix cache
                self.cached.append(BlockState(block_hash, depth, self.engine.clock))
        self.call("on_request_finished", request, reason, self.engine)

    def abort(self) -> None:
        pool = self.waiting + self.running
        if not pool:
            return
        request = pool[self.rng.randrange(len(pool))]
        if request in self.running:
            self.release(request)
        else:
            self.waiting.remove(request)
        self.call("on_request_finished", request, "aborted", self.engine)
