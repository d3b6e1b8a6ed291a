"""Policies for the SGLang adapter's tests. SGLang runs its scheduler in a spawned
process, so the tests select these by name through a real entry point: this directory
(with its dist-info) goes on the scheduler's PYTHONPATH. ``test-stalling`` is the contract
suite's ``Stalling`` (``schedkit.testing.contract``), named there by the dist-info."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from schedkit import (
    Admission,
    BatchBudget,
    BlockView,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)


class RejectLong(Policy):
    """Rejects prompts longer than ``max_prompt`` tokens."""

    class Options(PolicyOptions):
        max_prompt: int = 32

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        limit = self.options.max_prompt  # type: ignore[attr-defined]
        if request.num_prompt_tokens > limit:
            return Admission.reject(f"prompt of {request.num_prompt_tokens} tokens > {limit}")
        return None


class MarkedVictims(Policy):
    """Preempts requests of tenant ``victim`` first."""

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView
    ) -> list[RequestView] | None:
        marked = [r for r in running if r.tenant == "victim"]
        return marked or None


class EvictRecent(Policy):
    """Evicts the most recently used prefix first (the opposite of LRU)."""

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        return sorted(candidates, key=lambda b: b.last_access, reverse=True)


class OneAtATime(Policy):
    """Lets one request run at a time (``plan_batch`` with ``max_running=1``)."""

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        return BatchBudget(
            token_budget=default.token_budget, max_running=1, prefill_chunk=default.prefill_chunk
        )


class StepLog(Policy):
    """Appends one JSON line per step to ``path``: its index, KV pages free and total,
    running, waiting, tokens (in all and per request), its duration, and the ids of the
    requests preempted."""

    class Options(PolicyOptions):
        path: str = ""

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        line = {
            "step": engine.step_index,
            "free": engine.kv_blocks_free,
            "total": engine.kv_blocks_total,
            "running": engine.num_running,
            "waiting": engine.num_waiting,
            "prefill": report.num_prefill_tokens,
            "decode": report.num_decode_tokens,
            "tokens": [
                [r.request_id, n]
                for r, n in zip(report.scheduled, report.num_scheduled_tokens, strict=True)
            ],
            "duration_s": report.duration_s,
            "preempted": [r.request_id for r in report.preempted],
            "block_hashes": {r.request_id: list(r.block_hashes) for r in report.scheduled},
        }
        with open(self.options.path, "a") as out:  # type: ignore[attr-defined]
            out.write(json.dumps(line) + "\n")


class Flaky(Policy):
    """Implements every hook; raises on ~10% of calls, otherwise answers at random."""

    class Options(PolicyOptions):
        seed: int = 0
        fault_rate: float = 0.1

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.rng = random.Random(self.options.seed)  # type: ignore[attr-defined]

    def _fault(self) -> None:
        if self.rng.random() < self.options.fault_rate:  # type: ignore[attr-defined]
            raise RuntimeError("flaky policy")

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        self._fault()
        return None

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        self._fault()
        order = list(waiting)
        self.rng.shuffle(order)
        return order

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        self._fault()
        return BatchBudget(
            token_budget=max(1, default.token_budget // 2),
            max_running=max(1, self.rng.randint(1, default.max_running)),
            prefill_chunk=default.prefill_chunk,
        )

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView
    ) -> list[RequestView]:
        self._fault()
        order = list(running)
        self.rng.shuffle(order)
        return order

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        self._fault()
        order = list(candidates)
        self.rng.shuffle(order)
        return order

    @hookimpl
    def on_step_finished(self, report: StepReport) -> None:
        self._fault()

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        self._fault()


class EchoMetadata(Policy):
    """Rejects requests of exactly ``prompt_tokens`` prompt tokens, with their metadata
    as the scheduler sees it as the reason: the client reads it in the finish reason."""

    class Options(PolicyOptions):
        prompt_tokens: int = 17

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if request.num_prompt_tokens != self.options.prompt_tokens:  # type: ignore[attr-defined]
            return None
        return Admission.reject(
            f"tenant={request.tenant} priority={request.priority}"
            f" slo_ttft_ms={request.slo_ttft_ms} slo_tpot_ms={request.slo_tpot_ms}"
        )
