"""The simulated engine advancing in wall-clock time: what ``schedkit serve sim`` serves.

A :class:`SimEngine` runs the requests delivered to it step by step up to a time it is
given (``advance``). Here that time is the wall clock since start: a request is delivered
when it arrives, the engine runs the step that starts next (its tokens are computed then)
and the tokens are released to their streams when the wall clock reaches the step's end,
so a client sees each token when the modelled GPU would have produced it. An idle engine
waits for the next arrival.

The engine keeps up while computing a step takes less wall time than the step models.
When it does not, a step's tokens are released after the step's modelled end: ``lag_s``
is how late the last ones were, ``late_steps`` counts steps whose tokens came more than
``max_lag_s`` late, and the first time is logged once as a warning (latencies are then
longer than the modelled GPU's).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from schedkit.edge.remote import block_hashes
from schedkit.facade import PolicyFacade
from schedkit.records import RequestRecord
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import SimEngine
from schedkit.sim.request import SimRequest
from schedkit.workload import TraceRequest

__all__ = ["Stream", "WallClockEngine", "prompt_hashes", "text_token_ids"]

log = logging.getLogger("schedkit.simserver")

KEEP_FINISHED = 4096  # delivered requests kept before the finished ones are dropped
TEXT_TOKEN_CHARS = 4  # text prompts: one token per 4 characters (no tokenizer here)


def prompt_hashes(ids: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """One hash per full block of ``block_tokens`` prompt tokens, each chained to the
    blocks before it (``schedkit.edge.remote.block_hashes``, as a router hashes them):
    equal prompt starts give equal hashes, so the simulated prefix cache shares them."""
    return tuple(block_hashes(ids, block_tokens))


def text_token_ids(text: str) -> list[int]:
    """Token ids for a text prompt without a tokenizer: one per ``TEXT_TOKEN_CHARS``
    characters (about what BPE tokenizers give for English), equal for equal text."""
    step = TEXT_TOKEN_CHARS
    return [zlib.crc32(text[i : i + step].encode()) for i in range(0, len(text), step)] or [0]


@dataclass(eq=False)
class Stream:
    """One request's progress as its client sees it: ``tokens`` released so far, and
    once it ends ``finish_reason`` (``length``, or ``rejected`` with ``reject_reason``)."""

    record: RequestRecord
    tokens: int = 0
    finish_reason: str = ""
    reject_reason: str = ""
    cached_tokens: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def updates(self) -> AsyncIterator[int]:
        """The released token count each time it grows, until the request ends."""
        seen = 0
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self.tokens > seen:
                seen = self.tokens
                yield seen
            if self.finish_reason:
                return


class WallClockEngine:
    """A :class:`SimEngine` whose clock is the wall clock since it started."""

    def __init__(
        self, cost: StepCost, config: SimConfig, facade: PolicyFacade, *, max_lag_s: float = 0.05
    ) -> None:
        self.engine = SimEngine([], cost, config, facade)
        self.cfg = config
        self.max_lag_s = max_lag_s
        self.started = time.monotonic()
        self.lag_s = 0.0  # how late the last step's tokens were released
        self.late_steps = 0
        self._warned = False
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: dict[str, int] = {}  # by finish reason
        self.rejections: dict[str, int] = {}  # by reason
        self._streams: dict[SimRequest, Stream] = {}
        self._next = 0  # requests delivered: each one's index in the engine
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        return time.monotonic() - self.started

    def submit(self, ids: Sequence[int], max_tokens: int, meta: TraceRequest) -> Stream:
        """Deliver a request now: prompt ``ids``, ``max_tokens`` to generate, its tenant,
        priority and SLO targets from ``meta`` (whose other fields are ignored)."""
        trace = TraceRequest(
            request_id=meta.request_id,
            arrival_s=self.now(),
            prompt_tokens=len(ids),
            output_tokens=max_tokens,
            tenant=meta.tenant,
            priority=meta.priority,
            slo_ttft_ms=meta.slo_ttft_ms,
            slo_tpot_ms=meta.slo_tpot_ms,
            hash_ids=prompt_hashes(ids, self.cfg.hash_block_tokens),
        )
        req = SimRequest.from_trace(
            self._next, trace, self.cfg.block_size, self.cfg.hash_block_tokens
        )
        self._next += 1
        self.engine.deliver_request(req)
        stream = Stream(req.record)
        self._streams[req] = stream
        self.prompt_tokens += len(ids)
        self._arrived.set()
        return stream

    def start(self) -> None:
        """Run the engine in the running event loop until ``stop``."""
        self.started = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        engine = self.engine
        while True:
            self._arrived.clear()
            steps = engine.step_index
            engine.advance(self.now())
            ahead = engine.clock - self.now()
            if engine.step_index > steps:
                self._count_late(-ahead, engine.step_index - steps)
            if ahead > 0:
                await asyncio.sleep(ahead)  # the step's tokens exist when it ends
            self._release()
            if self._idle():
                await self._arrived.wait()
            else:
                await asyncio.sleep(0)  # let arrivals and clients in between steps

    def _idle(self) -> bool:
        engine = self.engine
        return not (engine.running or engine.waiting or engine.arrived < len(engine.pending))

    def _count_late(self, late: float, steps: int) -> None:
        """The ``steps`` steps just run ended ``late`` seconds of wall time ago (their
        tokens are released that late; negative: not yet ended)."""
        self.lag_s = max(0.0, late)
        if self.lag_s <= self.max_lag_s:
            return
        self.late_steps += steps
        if not self._warned:
            self._warned = True
            log.warning(
                "schedkit serve sim: a step ended %.0f ms before the simulator had computed it;"
                " it cannot keep up with this load in real time, so latencies are longer than"
                " the modelled GPU's (schedkit_sim_late_steps_total counts late steps; run"
                " more server processes or send fewer requests per second)",
                self.lag_s * 1e3,
            )

    def _release(self) -> None:
        """Give each stream the tokens its request has by now, and end those that ended."""
        ended = []
        for req, stream in self._streams.items():
            tokens = req.num_output_tokens
            record = req.record
            if tokens > stream.tokens:
                self.generation_tokens += tokens - stream.tokens
                stream.tokens = tokens
                stream.cached_tokens = req.num_cached_tokens
                stream._changed.set()
            if record.finish_reason:
                stream.finish_reason = record.finish_reason
                stream.reject_reason = record.reject_reason or ""
                stream._changed.set()
                ended.append(req)
                self.finished[record.finish_reason] = self.finished.get(record.finish_reason, 0) + 1
                if record.reject_reason:
                    why = record.reject_reason
                    self.rejections[why] = self.rejections.get(why, 0) + 1
        for req in ended:
            del self._streams[req]
        self._forget()

    def _forget(self) -> None:
        """Drop delivered requests that have ended from the engine's lists, so a server
        running for days holds only what is in flight."""
        engine = self.engine
        if engine.arrived < KEEP_FINISHED:
            return
        del engine.pending[: engine.arrived]
        engine.arrived = 0
        engine.result.records[:] = [r.record for r in engine.pending]
        engine.result.timeline.clear()
