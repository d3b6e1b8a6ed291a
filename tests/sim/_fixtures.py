"""Builders, probes and strategies shared by the simulator tests.

Everything here drives the real engine, cost models, KV cache and facade; the only test
double is ``ProbedEngine``, a ``SimEngine`` subclass that counts loop iterations, caps
steps (so a livelock fails instead of hanging the suite).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hypothesis import strategies as st

from schedkit import Admission, BatchBudget, Policy, PolicyFacade, StepReport, hookimpl
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.cost.model import LinearCostModel, RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model
from schedkit.sim.engine import SimEngine
from schedkit.sim.request import SimRequest
from schedkit.views import BlockView, EngineView, RequestView
from schedkit.workload import TraceRequest

# Every step takes 10 ms whatever it computes, so hand-built scenarios have exact times.
TEN_MS = LinearCostModel(c0=0.01, c_prefill=0.0, c_decode=0.0, c_kv=0.0)
# Both regimes of a real model: compute-bound prefill, memory-bound decode.
ROOFLINE = RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
# Fitted-profile shape with every term non-zero, so step times depend on the batch.
LINEAR = LinearCostModel(c0=0.004, c_prefill=2e-5, c_decode=1e-4, c_kv=2e-7, c_attn=1e-9)

STEP_CAP = 100_000  # far above any test workload; reaching it means the engine livelocked


class Livelock(AssertionError):
    """The engine stepped past ``STEP_CAP``."""


def req(
    rid: str,
    arrival: float,
    prompt: int,
    output: int,
    *,
    hash_ids: tuple[int, ...] = (),
    priority: int = 0,
) -> TraceRequest:
    return TraceRequest(rid, arrival, prompt, output, priority=priority, hash_ids=hash_ids)


class ProbedEngine(SimEngine):
    """``SimEngine`` that counts its loop iterations and caps steps.

    ``iterations`` counts engine-loop steps taken (one per ``_step`` and one per run of
    decode steps advanced at once); ``peak_running`` is the most requests computed in one
    step; ``waiting_after`` keeps the waiting queue's ids after every step when
    ``trace_waiting`` is set.

    """

    def __init__(
        self,
        *args: Any,
        trace_waiting: bool = False,
        step_cap: int = STEP_CAP,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.step_cap = step_cap
        self.iterations = 0
        self.decode_stretches = 0
        self.peak_running = 0
        self.trace_waiting = trace_waiting
        self.waiting_after: list[list[str]] = []

    def _step(self, budget: BatchBudget) -> None:
        self.iterations += 1
        super()._step(budget)
        self._after_step()

    def _execute(
        self, scheduled: dict[SimRequest, int], preempted: list[SimRequest], lane: int = 0
    ) -> None:
        self.peak_running = max(self.peak_running, len(scheduled) + lane)
        super()._execute(scheduled, preempted, lane)

    def _decode_stretch(self, k: int, kv0: int, need: int) -> None:
        self.iterations += 1
        self.decode_stretches += 1
        self.peak_running = max(self.peak_running, len(self.running))
        super()._decode_stretch(k, kv0, need)
        self._after_step()

    def _after_step(self) -> None:
        if self.trace_waiting:
            self.waiting_after.append([r.request_id for r in self.waiting])
        if self.view.step_index > self.step_cap or self.iterations > 2 * self.step_cap:
            raise Livelock(
                f"{self.view.step_index} steps, {self.result.preemptions} preemptions:"
                f" running {[r.request_id for r in self.running]},"
                f" waiting {[r.request_id for r in self.waiting]}"
            )


def engine(
    requests: Iterable[TraceRequest],
    config: SimConfig,
    policies: Sequence[tuple[str, Policy]] = (),
    *,
    cost: StepCost = TEN_MS,
    stretch: bool = True,
    check: bool = True,
    **probe: Any,
) -> ProbedEngine:
    return ProbedEngine(
        list(requests),
        cost,
        config,
        PolicyFacade(list(policies)),
        stretch=stretch,
        check_invariants=check,
        **probe,
    )


def by_id(result: RunResult) -> dict[str, RequestRecord]:
    return {r.request_id: r for r in result.records}


def assert_drained(eng: SimEngine) -> None:
    """Nothing left in the engine and every KV block free, cached ones included."""
    kv = eng.kv
    assert not eng.running and not eng.waiting
    assert kv.referenced_blocks() == 0
    assert kv.num_free == kv.num_blocks == eng.cfg.num_blocks
    assert kv.num_used == 0
    kv.check([])


RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))


def record_diffs(
    a: Sequence[RequestRecord],
    b: Sequence[RequestRecord],
    *,
    rel: float = 0.0,
    skip: Callable[[str, str], bool] = lambda rid, name: False,
) -> list[str]:
    """Fields that differ, floats compared to ``rel`` (0: exactly)."""
    assert [r.request_id for r in a] == [r.request_id for r in b]
    out = []
    for x, y in zip(a, b, strict=True):
        for name in RECORD_FIELDS:
            u, v = getattr(x, name), getattr(y, name)
            if skip(x.request_id, name):
                continue
            if isinstance(u, float) and isinstance(v, float):
                same = u == v if rel == 0 else math.isclose(u, v, rel_tol=rel, abs_tol=1e-12)
            else:
                same = u == v
            if not same:
                out.append(f"{x.request_id}.{name}: {u!r} != {v!r}")
    return out


def counters(result: RunResult) -> dict[str, Any]:
    """Every RunResult field but the host time."""
    out = dataclasses.asdict(result)
    del out["wall_s"], out["records"]
    return out


# -- policies used through the facade -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    """A StepReport with request ids in place of the (live) request views."""

    num_steps: int
    duration_s: float
    prefill: int
    decode: int
    scheduled: tuple[str, ...]
    num_tokens: tuple[int, ...]  # parallel to ``scheduled``
    preempted: tuple[str, ...]
    num_running: int  # after the step(s)

    @property
    def tokens(self) -> dict[str, int]:
        return dict(zip(self.scheduled, self.num_tokens, strict=False))


class Observer(Policy):
    """Records every step report and finished request."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Step] = []
        self.finished: list[tuple[str, str]] = []

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        self.steps.append(
            Step(
                report.num_steps,
                report.duration_s,
                report.num_prefill_tokens,
                report.num_decode_tokens,
                tuple(r.request_id for r in report.scheduled),
                tuple(report.num_scheduled_tokens),
                tuple(r.request_id for r in report.preempted),
                engine.num_running,
            )
        )

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self.finished.append((request.request_id, reason))


class RejectLongPrompts(Policy):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if request.num_prompt_tokens > self.limit:
            return Admission.reject("prompt too long")
        return None


class ShortestPromptFirst(Policy):
    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        return sorted(waiting, key=lambda r: r.num_prompt_tokens)


class OldestOtherVictim(Policy):
    """Preempts the earliest admitted running request other than the one in need."""

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        return [r for r in running if r is not needing][:1]


class EvictNewestFirst(Policy):
    """Most recently used first: the reverse of the engine's LRU."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[int], int]] = []

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView]:
        self.calls.append(([b.block_hash for b in candidates], num_blocks))
        return list(reversed(candidates))


class TokenBudget(Policy):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        return BatchBudget(self.tokens, default.max_running, default.prefill_chunk)


class Faulty(Policy):
    """Implements every hook; raises where ``should_raise()`` says so, else has no opinion."""

    def __init__(self, should_raise: Callable[[], bool]) -> None:
        super().__init__()
        self.should_raise = should_raise
        self.calls: dict[str, int] = {}
        self.raised: dict[str, int] = {}

    def _call(self, hook: str) -> None:
        self.calls[hook] = self.calls.get(hook, 0) + 1
        if self.should_raise():
            self.raised[hook] = self.raised.get(hook, 0) + 1
            raise RuntimeError(f"{hook} failed")

    @hookimpl
    def on_request_arrived(self, request: RequestView, engine: EngineView) -> None:
        self._call("on_request_arrived")

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> None:
        self._call("admit_request")

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> None:
        self._call("order_waiting")

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> None:
        self._call("plan_batch")

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> None:
        self._call("select_victims")

    @hookimpl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> None:
        self._call("select_evictions")

    @hookimpl
    def waiting_key(self, request: RequestView, engine: EngineView) -> None:
        self._call("waiting_key")

    @hookimpl
    def victim_key(self, request: RequestView, engine: EngineView) -> None:
        self._call("victim_key")

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> None:
        self._call("eviction_key")

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        self._call("on_step_finished")

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._call("on_request_finished")


# -- strategies -----------------------------------------------------------------------

BLOCK = 16
# Leading hash ids that requests may share: two prefixes that fork after two ids, one apart.
PREFIX_ROOTS = ((1, 2, 3, 4), (1, 2, 7, 8), (5, 6))


@st.composite
def workloads(
    draw: st.DrawFn,
    *,
    max_requests: int = 40,
    max_prompt: int = 300,
    max_output: int = 120,
) -> list[TraceRequest]:
    """Requests with bursts (several at one instant), idle gaps, priorities and shared
    prefixes (hash ids from ``PREFIX_ROOTS``, then ids of their own).
    """
    n = draw(st.integers(1, max_requests))
    gaps = draw(
        st.lists(
            st.one_of(st.just(0.0), st.floats(0.0, 0.05), st.floats(0.05, 1.5)),
            min_size=n,
            max_size=n,
        )
    )
    out, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        root = draw(st.sampled_from(PREFIX_ROOTS))
        shared = draw(st.one_of(st.integers(0, len(root)), st.just(len(root))))
        own = draw(st.integers(0, 3))
        out.append(
            TraceRequest(
                f"r{i}",
                t,
                draw(st.integers(0, max_prompt)),  # 0 and 1 exercise the engine's max(1, ...)
                draw(st.integers(0, max_output)),
                priority=draw(st.integers(0, 2)),
                hash_ids=root[:shared] + tuple(1000 * (i + 1) + j for j in range(own)),
            )
        )
    return out


@st.composite
def configs(draw: st.DrawFn, *, min_blocks: int = 4, max_blocks: int = 96) -> SimConfig:
    """Small KV caches (preemption, eviction, some requests too big to ever fit), with or
    without prefix caching, chunking caps and a cap on running requests."""
    return SimConfig(
        num_blocks=draw(st.integers(min_blocks, max_blocks)),
        block_size=BLOCK,
        max_num_seqs=draw(st.sampled_from([1, 2, 3, 8, 256])),
        max_num_batched_tokens=draw(st.sampled_from([16, 48, 100, 8192])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 24])),
        enable_prefix_caching=draw(st.booleans()),
        mixed_prefill=draw(st.booleans()),
        # 16, 32, 64: per-hash blocks of 1, 2, 4; 24 is no multiple of 16, so hashes are ignored.
        hash_block_tokens=draw(st.sampled_from([0, 16, 32, 64, 64, 24])),
    )


cost_models = st.sampled_from([ROOFLINE, LINEAR, TEN_MS])


def fits(r: TraceRequest, config: SimConfig) -> bool:
    """Whether the engine accepts ``r`` (prompt + max_tokens within the KV capacity)."""
    tokens = max(1, r.prompt_tokens) + max(1, r.output_tokens)
    return -(-tokens // config.block_size) <= config.num_blocks
