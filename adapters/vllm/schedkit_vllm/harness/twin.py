"""Twin mode: the real vLLM V1 scheduler and KV cache manager, with the cost model as clock.

``schedkit bench --engine vllm-twin`` replays a workload through ``schedkit_vllm.Scheduler``
(the arm's policies in ``additional_config``) with no model and no workers. The loop is
the simulator's: arrivals up to the clock are added, ``schedule()`` runs, the step's
duration comes from ``bench.cost.step_time`` with the simulator's definitions of prefill,
decode, KV and attention work, the clock advances, and a fabricated model output samples
one token for every request whose computed tokens reach its length. The result is the
simulator's ``RunResult``, so metrics and reports mean the same; the simulator is what
this checks (see ``benchmarks/fidelity/vllm-twin.md``).

Differences from the simulator that are deliberate: vLLM reserves one block of the pool
as its null block, so the twin's pool has ``num_blocks + 1`` blocks (the same usable
capacity); every decode step is a real ``schedule()`` call (no runs of identical steps
advanced at once), so a twin run costs about 1-4 ms per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from schedkit.bench.engines.requests import (
    new_record,
    output_token_id,
    prompt_token_ids,
    request_metadata,
)
from schedkit.config import SchedkitConfig
from schedkit.facade import PolicyFacade
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.engine import no_cyclic_gc
from schedkit.sim.recorder import Recorder
from schedkit.workload import TraceRequest

from schedkit_vllm.harness.modelless import build_for, model_less_token_id, model_runner_output

if TYPE_CHECKING:
    from schedkit.bench.runner import Bench

__all__ = ["StepLog", "TwinEngine", "run_twin_arm"]

# (request id, tokens scheduled) per step, in vLLM's scheduling order.
StepLog = Callable[[int, float, dict[str, int], Sequence[str]], None]


def run_twin_arm(bench: Bench, index: int, rate_scale: float) -> RunResult:
    """``schedkit.engines`` entry point ``vllm-twin``: one arm on the real vLLM scheduler."""
    engine = TwinEngine(
        bench.workload(rate_scale).requests, bench.cost, bench.sim_config, bench.configs[index]
    )
    return engine.run()


class TwinEngine:
    """One replay of ``requests`` through ``schedkit_vllm.Scheduler`` with ``config``.

    ``facade``, when given, supplies the policies (objects) instead of ``schedkit``.
    ``on_step(step, clock, scheduled, preempted)``, when given, sees each step's
    ``{request id: tokens}`` (vLLM's order) and preempted ids, before the clock advances.
    """

    def __init__(
        self,
        requests: Sequence[TraceRequest],
        cost: StepCost,
        config: SimConfig,
        schedkit: SchedkitConfig,
        *,
        on_step: StepLog | None = None,
        facade: PolicyFacade | None = None,
    ) -> None:
        self.traces = sorted(requests, key=lambda r: r.arrival_s)  # stable, as the simulator
        self.cost = cost
        self.cfg = config
        self.on_step = on_step
        self.scheduler = build_for(
            config,
            self.traces,
            # schedkit's `priority` orders when selected; a given facade is installed below.
            schedkit=schedkit.model_dump() if facade is None else None,
        )
        if facade is not None:
            self.scheduler.install_schedkit(facade, schedkit.trust)
        runtime = self.scheduler.schedkit
        # Policies see the simulated clock, the one arrival times are on, as in the
        # simulator (not the wall clock vLLM stamps requests with).
        self.clock = 0.0
        if runtime is not None:
            runtime.engine.use_clock(lambda: self.clock)
        self.facade: PolicyFacade = (
            runtime.facade if runtime is not None else PolicyFacade.from_config(schedkit)
        )
        self.records = [new_record(t) for t in self.traces]
        self.result = RunResult(policy=self.facade.label, records=self.records, duration_s=0.0)
        self.recorder = Recorder(self.result, config.timeline_interval_s)
        self.steps = 0  # steps that scheduled tokens
        self._live: dict[str, tuple[int, RequestRecord, Any]] = {}  # index, record, Request
        self._last_computed: dict[str, int] = {}  # computed tokens at the end of its last step
        self._lost: dict[str, int] = {}  # computed tokens thrown away by its last preemption
        self._last_token: dict[str, float] = {}

    def run(self) -> RunResult:
        with no_cyclic_gc():
            return self._run()

    def _run(self) -> RunResult:
        started = time.perf_counter()
        sched, traces = self.scheduler, self.traces
        nxt = 0
        while nxt < len(traces) or sched.has_requests():
            unfinished = sched.get_num_unfinished_requests()
            if not unfinished and nxt < len(traces) and self.clock < traces[nxt].arrival_s:
                self.clock = traces[nxt].arrival_s
            while nxt < len(traces) and traces[nxt].arrival_s <= self.clock:
                self._arrive(nxt)
                nxt += 1
            if sched.has_requests():
                self._step(unfinished, traces[nxt].arrival_s if nxt < len(traces) else None)
        for rec in self.records:
            if rec.finish_reason == "" and rec.request_id in self._live:
                rec.output_tokens = self._live[rec.request_id][2].num_output_tokens
        return self.recorder.finish(self.clock, self.steps, self.facade, started)

    def _step(self, unfinished: int, next_arrival: float | None) -> None:
        """One ``schedule()``, its cost on the clock and its fabricated model output: one
        token for every request whose computed tokens reach its length."""
        sched = self.scheduler
        output = sched.schedule()
        counts: dict[str, int] = output.num_scheduled_tokens
        preempted = output.preempted_req_ids or set()
        self._preempted(preempted)
        work, sampled_ids, sampled = self._scheduled(counts)
        if self.on_step is not None:
            self.on_step(self.steps, self.clock, dict(counts), sorted(preempted))
        if not counts and not preempted and unfinished:
            if next_arrival is not None:  # nothing fits until something arrives
                self.clock = max(self.clock, next_arrival)
                sched.update_from_output(output, model_runner_output([], []))
                return
            raise RuntimeError(
                f"vllm-twin made no progress at t={self.clock}: {unfinished} requests unfinished"
            )
        duration = self.cost.step_time(*work) if counts else 0.0
        self.recorder.kv_usage(duration, self._kv_usage())
        self.clock += duration
        self.steps += 1 if counts else 0
        sched.update_from_output(output, model_runner_output(list(counts), sampled_ids))
        self._sampled(sampled)
        for rid in counts:
            if rid in self._live:
                self._last_computed[rid] = self._live[rid][2].num_computed_tokens
        running, waiting = sched.get_request_counts()
        self.recorder.sample(self.clock, waiting, running, self._kv_usage())

    def _preempted(self, preempted: set[str]) -> None:
        for rid in preempted:
            rec = self._live[rid][1]
            rec.preemptions += 1
            self.result.preemptions += 1
            self._lost[rid] = self._last_computed.get(rid, 0)

    def _scheduled(
        self, counts: dict[str, int]
    ) -> tuple[tuple[int, int, int, int], list[list[int]], list[str]]:
        """Record each scheduled request's first scheduling, cached and recomputed tokens.
        The step's work (prefill, decode, KV and attention tokens, as the simulator
        defines them), the token each request samples (none mid-prompt) and who samples."""
        res = self.result
        prefill = decode = kv_tokens = attn = 0
        sampled_ids: list[list[int]] = []
        sampled: list[str] = []
        for rid, n in counts.items():
            index, rec, request = self._live[rid]
            c = request.num_computed_tokens - n  # schedule() already counted this step
            if rec.scheduled_s is None:
                rec.scheduled_s = self.clock
                rec.cached_tokens = c
                res.prefix_query_tokens += request.num_tokens
                res.prefix_hit_tokens += c
            if rid in self._lost:
                redone = max(0, self._lost.pop(rid) - c)
                res.recomputed_tokens += redone
                rec.recomputed_tokens += redone
            if n == 1 and c == request.num_tokens - 1:
                decode += 1
                attn += c + 1
            else:
                prefill += n
                attn += n * c + n * (n + 1) // 2
            kv_tokens += c + n
            if request.num_computed_tokens >= request.num_tokens:
                token = output_token_id(index, request.num_tokens)
                sampled_ids.append([model_less_token_id(token)])
                sampled.append(rid)
            else:
                sampled_ids.append([])
        return (prefill, decode, kv_tokens, attn), sampled_ids, sampled

    def _sampled(self, sampled: list[str]) -> None:
        """Time the tokens of the step that just ended; finish the requests it ended."""
        for rid in sampled:
            _, rec, request = self._live[rid]
            if rec.first_token_s is None:
                rec.first_token_s = self.clock
            else:
                self.recorder.token_gap(self.clock - self._last_token[rid], 1)
            self._last_token[rid] = self.clock
            if request.is_finished():
                rec.finish_reason = "length"
                rec.finish_s = self.clock
                rec.output_tokens = request.num_output_tokens
                del self._live[rid]
                self._last_computed.pop(rid, None)
                self._last_token.pop(rid, None)

    def _kv_usage(self) -> float:
        """The share of the usable KV blocks in use (vLLM's null block is not usable)."""
        pool = self.scheduler.kv_cache_manager.block_pool
        return float(pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()) / self.cfg.num_blocks

    def _arrive(self, index: int) -> None:
        trace, rec, cfg = self.traces[index], self.records[index], self.cfg
        need = -(-(rec.prompt_tokens + rec.max_tokens) // cfg.block_size)
        if need > cfg.num_blocks:  # vLLM would hold it waiting forever; the simulator rejects
            self._reject(
                rec, f"prompt + max_tokens need {need} KV blocks, capacity is {cfg.num_blocks}"
            )
            return
        request = _make_request(trace, index, rec, cfg)
        runtime = self.scheduler.schedkit
        before = dict(runtime.rejections) if runtime is not None else {}
        self.scheduler.add_request(request)
        if request.is_finished():  # rejected by the policy's admit_request
            reason = "rejected"
            if runtime is not None:
                for key, count in runtime.rejections.items():
                    if count > before.get(key, 0):
                        reason = key
            self._reject(rec, reason)
            return
        self._live[rec.request_id] = (index, rec, request)

    def _reject(self, rec: RequestRecord, reason: str) -> None:
        rec.finish_reason = "rejected"
        rec.reject_reason = reason
        rej = self.result.rejections
        rej[reason] = rej.get(reason, 0) + 1


# -- building vLLM objects -----------------------------------------------------------

_HASHER: dict[int, Any] = {}


def _block_hasher(block_size: int) -> Any:
    hasher = _HASHER.get(block_size)
    if hasher is None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        hash_fn = get_hash_fn_by_name("sha256_cbor")
        init_none_hash(hash_fn)
        hasher = _HASHER[block_size] = get_request_block_hasher(block_size, hash_fn)
    return hasher


def _make_request(trace: TraceRequest, index: int, rec: RequestRecord, cfg: SimConfig) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(
        max_tokens=rec.max_tokens, ignore_eos=True, extra_args=request_metadata(trace)
    )
    return Request(
        rec.request_id,
        [
            model_less_token_id(t)
            for t in prompt_token_ids(trace, index, cfg.block_size, cfg.hash_block_tokens)
        ],
        params,
        pooling_params=None,
        block_hasher=_block_hasher(cfg.block_size),
        priority=rec.priority,
        arrival_time=rec.arrival_s,
    )
