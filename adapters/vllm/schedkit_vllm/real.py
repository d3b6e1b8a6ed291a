"""Real-engine A/B: each arm on an in-process vLLM engine, timed by the wall clock.

``schedkit bench --engine vllm --model DIR ...`` builds one ``vllm.LLM`` per arm (engine
core in this process, ``scheduler_cls="schedkit_vllm.Scheduler"``, the arm's policies in
``additional_config``), submits each request of the workload when the wall clock reaches
its (scaled) arrival time, and steps the engine until every request has finished. The
result is the simulator's ``RunResult``, so metrics and reports mean the same.

What is measured, in seconds from the start of the replay (``time.perf_counter``):

- ``arrival_s`` is the trace's arrival time; a request is submitted at the first step
  boundary at or after it, so the time it waits for the engine's current step to end
  counts toward its TTFT, as it would for a client.
- ``scheduled_s``: when the ``schedule()`` call that first gave it tokens started (the
  scheduler's own view: ``schedule`` is wrapped on the engine's scheduler instance);
  ``cached_tokens``, prefix hits and preemptions come from the same ``SchedulerOutput``.
- ``first_token_s``, each later token (one inter-token gap per token) and ``finish_s``:
  when ``engine.step()`` returned the output carrying it.
- Rejections: an output with ``finish_reason="abort"`` and ``stop_reason="rejected: why"``.

Prompts are token ids (``skip_tokenizer_init``) built as the twin builds them, mixed into
the model's vocabulary; shared prefixes stay shared. ``max_model_len`` is the longest
prompt plus output of the workload, up to the model's ``max_position_embeddings``; longer
requests are clipped (prompt first) and counted in ``results.json`` under
``engine.real.clipped_requests``. Keep workloads for this engine small: every token is
really computed.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from schedkit.bench.records import RequestRecord, RunResult
from schedkit.bench.replay import ModelInfo, fit_traces, model_info
from schedkit.facade import PolicyFacade
from schedkit.sim.recorder import Recorder

from schedkit_vllm._replay import extra_args, new_record, prompt_token_ids

if TYPE_CHECKING:
    from schedkit.bench.runner import Bench

__all__ = ["ModelInfo", "RealEngine", "model_info", "run_real_arm"]

log = logging.getLogger("schedkit.vllm")

NO_PROGRESS_STEPS = 10_000  # consecutive empty steps with nothing left to arrive: stuck


def run_real_arm(bench: Bench, index: int, rate_scale: float) -> RunResult:
    """``schedkit.engines`` entry point ``vllm``: one arm on a real in-process vLLM."""
    info = model_info(bench.spec.model, "vllm")
    engine = RealEngine(bench, index, rate_scale, info)
    try:
        return engine.run()
    finally:
        engine.close()


class RealEngine:
    """One replay of the bench's workload on a fresh ``vllm.LLM`` with arm ``index``."""

    def __init__(self, bench: Bench, index: int, rate_scale: float, info: ModelInfo) -> None:
        self.bench, self.info = bench, info
        cfg = bench.sim_config
        traces = sorted(bench.workload(rate_scale).requests, key=lambda r: r.arrival_s)
        self.max_model_len, self.traces, clipped = fit_traces(traces, info.max_positions)
        if clipped:
            log.warning(
                "--engine vllm: %d of %d requests clipped to the model's %d positions",
                clipped,
                len(traces),
                info.max_positions,
            )
        self.block_size = _block_size(cfg.block_size)
        self.records = [new_record(t) for t in self.traces]
        self.prompts = [
            prompt_token_ids(t, i, self.block_size, cfg.hash_block_tokens, info.vocab_size)
            for i, t in enumerate(self.traces)
        ]
        self.llm = _build_llm(bench, index, info, self.max_model_len, self.block_size)
        self.engine = self.llm.llm_engine
        self.scheduler = self.engine.engine_core.engine_core.scheduler
        runtime = getattr(self.scheduler, "schedkit", None)
        self.facade: PolicyFacade = (
            runtime.facade
            if runtime is not None
            else PolicyFacade.from_config(bench.configs[index])
        )
        self.result = RunResult(policy=self.facade.label, records=self.records, duration_s=0.0)
        self.recorder = Recorder(self.result, cfg.timeline_interval_s)
        pool = self.scheduler.kv_cache_manager.block_pool
        self.capacity_blocks = int(pool.num_gpu_blocks) - 1  # one is vLLM's null block
        # Timed by the wall clock on this machine: the simulated GPU and cost model do not apply.
        bench.engine_info["gpu"] = "this machine (wall clock)"
        bench.engine_info.pop("cost_model", None)
        bench.engine_info["real"] = {
            "model_dir": str(info.path),
            "max_model_len": self.max_model_len,
            "clipped_requests": clipped,
            "kv_blocks": self.capacity_blocks,
            "block_size": self.block_size,
            "clock": "wall",
        }
        self._start = 0.0
        self._by_id: dict[str, int] = {}  # vLLM's internal id and the trace's id -> index
        self._steps = 0

    def close(self) -> None:
        """Shut the engine down and free its memory before the next arm builds one."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        del self.llm, self.engine, self.scheduler
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # pragma: no cover - best effort
            log.debug("engine shutdown failed", exc_info=True)
        del llm
        gc.collect()

    # -- the replay ------------------------------------------------------------------

    def run(self) -> RunResult:
        self._wrap_schedule()
        engine, sched, recorder, records = self.engine, self.scheduler, self.recorder, self.records
        traces = self.traces
        started = time.perf_counter()
        self._start = started
        last_token: dict[int, float] = {}
        seen_tokens: dict[int, int] = {}
        nxt, idle_steps = 0, 0
        now = 0.0
        while True:
            now = time.perf_counter() - started
            while nxt < len(traces) and traces[nxt].arrival_s <= now:
                self._submit(nxt)
                nxt += 1
            if not engine.has_unfinished_requests():
                if nxt >= len(traces):
                    break
                time.sleep(max(0.0, traces[nxt].arrival_s - now))
                continue
            before = time.perf_counter()
            outputs = engine.step()
            after = time.perf_counter()
            clock = after - started
            usage = float(sched.kv_cache_manager.usage)
            recorder.kv_usage(after - before, usage)
            progressed = False
            for out in outputs:
                i = self._by_id.get(out.request_id)
                if i is None:
                    continue
                rec = records[i]
                completion = out.outputs[0] if out.outputs else None
                n = len(completion.token_ids) if completion is not None else 0
                new = n - seen_tokens.get(i, 0)
                if new > 0:
                    progressed = True
                    seen_tokens[i] = n
                    if rec.first_token_s is None:
                        rec.first_token_s = clock
                        new -= 1
                    elif i in last_token:
                        recorder.token_gap(clock - last_token[i], 1)
                        new -= 1
                    for _ in range(new):  # several tokens in one step: no gap between them
                        recorder.token_gap(0.0, 1)
                    last_token[i] = clock
                if out.finished and rec.finish_reason == "":
                    progressed = True
                    self._finish(rec, completion, n, clock)
            running, waiting = sched.get_request_counts()
            recorder.sample(clock, waiting, running, usage)
            idle_steps = 0 if progressed or outputs else idle_steps + 1
            if idle_steps > NO_PROGRESS_STEPS and nxt >= len(traces):
                raise RuntimeError(
                    f"--engine vllm made no progress for {idle_steps} steps at t={clock:.2f}s:"
                    f" {engine.get_num_unfinished_requests()} requests unfinished"
                )
        duration = max((r.finish_s or 0.0 for r in records), default=0.0) or now
        return recorder.finish(duration, self._steps, self.facade, started)

    def _submit(self, index: int) -> None:
        from vllm import SamplingParams

        trace, rec = self.traces[index], self.records[index]
        need = -(-(rec.prompt_tokens + rec.max_tokens) // self.block_size)
        if need > self.capacity_blocks:  # vLLM would hold it waiting forever; reject as sim
            self._reject(
                rec,
                f"prompt + max_tokens need {need} KV blocks, capacity is {self.capacity_blocks}",
            )
            return
        params = SamplingParams(
            max_tokens=rec.max_tokens,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
            extra_args=extra_args(trace),
        )
        self._by_id[rec.request_id] = index
        internal = self.engine.add_request(
            rec.request_id,
            {"prompt_token_ids": self.prompts[index]},
            params,
            priority=rec.priority,
        )
        self._by_id[internal] = index

    def _finish(self, rec: RequestRecord, completion: Any, tokens: int, clock: float) -> None:
        reason = getattr(completion, "finish_reason", None) or "aborted"
        stop = getattr(completion, "stop_reason", None)
        if reason == "abort" and isinstance(stop, str) and stop.startswith("rejected:"):
            self._reject(rec, stop.removeprefix("rejected:").strip() or "rejected")
            return
        rec.finish_reason = "aborted" if reason == "abort" else str(reason)
        rec.finish_s = clock
        rec.output_tokens = tokens

    def _reject(self, rec: RequestRecord, reason: str) -> None:
        rec.finish_reason = "rejected"
        rec.reject_reason = reason
        rej = self.result.rejections
        rej[reason] = rej.get(reason, 0) + 1

    def _wrap_schedule(self) -> None:
        """See every ``SchedulerOutput``: first scheduling, cached tokens, preemptions."""
        sched, res, records = self.scheduler, self.result, self.records
        by_id = self._by_id
        schedule = sched.schedule
        last_computed: dict[str, int] = {}
        lost: dict[str, int] = {}

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter() - self._start
            output = schedule(*args, **kwargs)
            counts: dict[str, int] = output.num_scheduled_tokens
            if counts:
                self._steps += 1
            for rid in output.preempted_req_ids or ():
                i = by_id.get(rid)
                if i is not None:
                    records[i].preemptions += 1
                    res.preemptions += 1
                    lost[rid] = last_computed.get(rid, 0)
            for rid, n in counts.items():
                i = by_id.get(rid)
                request = sched.requests.get(rid)
                if i is None or request is None:
                    continue
                c = request.num_computed_tokens - n  # schedule() already counted this step
                rec = records[i]
                if rec.scheduled_s is None:
                    rec.scheduled_s = t
                    rec.cached_tokens = c
                    res.prefix_query_tokens += request.num_tokens
                    res.prefix_hit_tokens += c
                if rid in lost:
                    res.recomputed_tokens += max(0, lost.pop(rid) - c)
                last_computed[rid] = request.num_computed_tokens
            return output

        sched.schedule = wrapped


def _block_size(requested: int) -> int:
    """``--block-size``, rounded up to a multiple of 32 on CPU (vLLM's CPU attention)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and requested % 32:
        size = -(-requested // 32) * 32
        log.warning("--engine vllm: block size %d on CPU (asked %d)", size, requested)
        return size
    return requested


def _build_llm(
    bench: Bench, index: int, info: ModelInfo, max_model_len: int, block_size: int
) -> Any:
    # The engine core must run in this process: the replay reads its scheduler.
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return _make_llm(bench, index, info, max_model_len, block_size)
    finally:
        if previous is None:
            del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous


def _make_llm(
    bench: Bench, index: int, info: ModelInfo, max_model_len: int, block_size: int
) -> Any:
    from vllm import LLM

    cfg, spec = bench.sim_config, bench.spec
    kwargs: dict[str, Any] = {}
    if spec.kv_blocks is not None:
        # Same token capacity in the engine's block size, + vLLM's null block.
        tokens = spec.kv_blocks * cfg.block_size
        kwargs["num_gpu_blocks_override"] = -(-tokens // block_size) + 1
    if cfg.long_prefill_token_threshold:
        kwargs["long_prefill_token_threshold"] = cfg.long_prefill_token_threshold
    return LLM(
        model=str(info.path),
        dtype="bfloat16",
        enforce_eager=True,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=max(cfg.max_num_batched_tokens, 1),
        block_size=block_size,
        enable_prefix_caching=cfg.enable_prefix_caching,
        enable_chunked_prefill=True,
        scheduling_policy="fcfs",  # schedkit's `priority` policy orders by priority
        async_scheduling=False,  # step() in this process; forced off on CPU anyway
        scheduler_cls="schedkit_vllm.Scheduler",
        additional_config={"schedkit": bench.configs[index].model_dump()},
        gpu_memory_utilization=spec.gpu_memory_utilization,
        seed=spec.seed,
        disable_log_stats=False,
        **kwargs,
    )
