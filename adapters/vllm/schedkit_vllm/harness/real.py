"""Real-engine A/B: each arm on an in-process vLLM engine, timed by the wall clock.

``schedkit bench --engine vllm --model DIR ...`` builds one ``vllm.LLM`` per arm (engine
core in this process, ``scheduler_cls="schedkit_vllm.Scheduler"``, the arm's policies in
``additional_config``), submits each request when the wall clock reaches its arrival
time, and steps the engine until every request has finished. What every real engine
measures the same way (clipping, prompts, the wall clock, the KV pre-check, rejections,
token gaps) is ``schedkit.bench.engines.real_arm``; what is vLLM's, in seconds from the start of
the replay:

- ``arrival_s``: a request is submitted at the first step boundary at or after it, so the
  time it waits for the engine's current step to end counts toward its TTFT.
- ``scheduled_s``: when the ``schedule()`` call that first gave it tokens started (the
  scheduler's own view: ``schedule`` is wrapped on the engine's scheduler instance);
  ``cached_tokens``, prefix hits, preemptions and recomputed tokens come from the same
  ``SchedulerOutput``.
- ``first_token_s``, each later token and ``finish_s``: when ``engine.step()`` returned
  the output carrying it.
- Rejections: an output with ``finish_reason="abort"`` and ``stop_reason="rejected: why"``.
- The timeline and KV usage: the scheduler's request counts and ``kv_cache_manager.usage``
  after every step; ``steps`` counts the ``schedule()`` calls that scheduled tokens.

``max_model_len`` is the longest prompt plus output of the workload, up to the model's
``max_position_embeddings``; the KV capacity is the pool's blocks less vLLM's null block
(``engine.real.kv_blocks``). On CPU the block size is rounded up to a multiple of 32.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from schedkit.bench.engines.real_arm import RealArm
from schedkit.bench.engines.requests import ModelInfo, request_metadata
from schedkit.records import RunResult

if TYPE_CHECKING:
    from schedkit.bench.runner import Bench

__all__ = ["RealEngine", "run_real_arm"]

log = logging.getLogger("schedkit.vllm")

NO_PROGRESS_STEPS = 10_000  # consecutive empty steps with nothing left to arrive: stuck


def run_real_arm(bench: Bench, index: int, rate_scale: float) -> RunResult:
    """``schedkit.engines`` entry point ``vllm``: one arm on a real in-process vLLM."""
    return RealEngine.run_arm(bench, index, rate_scale)


class RealEngine(RealArm):
    """One replay of the bench's workload on a fresh ``vllm.LLM`` with arm ``index``."""

    engine_name = "vllm"

    def __init__(self, bench: Bench, index: int, rate_scale: float, info: ModelInfo) -> None:
        block_size = _block_size(bench.sim_config.block_size)
        super().__init__(bench, index, rate_scale, info, block_size=block_size)
        self.llm = _build_llm(bench, index, info, self.max_model_len, self.block_size)
        self.engine = self.llm.llm_engine
        self.scheduler = self.engine.engine_core.engine_core.scheduler
        runtime = getattr(self.scheduler, "schedkit", None)
        if runtime is not None:  # the policies run in this process: count their faults
            self.facade = runtime.facade
        pool = self.scheduler.kv_cache_manager.block_pool
        self.capacity_blocks = int(pool.num_gpu_blocks) - 1  # one is vLLM's null block
        self.real_info.update(
            kv_blocks=self.capacity_blocks,
            block_size=self.block_size,
            max_num_seqs=int(self.scheduler.max_num_running_reqs),  # what vLLM runs with
        )
        self._by_id: dict[str, int] = {}  # vLLM's internal id and the trace's id -> index
        self._steps = 0

    def close(self) -> None:
        """Shut the engine down and free its memory before the next arm builds one."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        runtime = getattr(self.scheduler, "schedkit", None)
        if runtime is not None:
            runtime.close()  # the step file, before the next arm's engine starts
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
        started = self.started = time.perf_counter()
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
                if self.record_tokens(rec, n, clock):
                    progressed = True
                if out.finished and rec.finish_reason == "":
                    progressed = True
                    reason = str(getattr(completion, "finish_reason", None) or "aborted")
                    if self.end(rec, reason, getattr(completion, "stop_reason", None), clock):
                        rec.output_tokens = n
            running, waiting = sched.get_request_counts()
            recorder.sample(clock, waiting, running, usage)
            idle_steps = 0 if progressed or outputs else idle_steps + 1
            if idle_steps > NO_PROGRESS_STEPS and nxt >= len(traces):
                raise RuntimeError(
                    f"--engine vllm made no progress for {idle_steps} steps at t={clock:.2f}s:"
                    f" {engine.get_num_unfinished_requests()} requests unfinished"
                )
        return self.finish_run(now, self._steps)

    def _submit(self, index: int) -> None:
        from vllm import SamplingParams

        trace, rec = self.traces[index], self.records[index]
        if not self.fits_kv(rec, self.capacity_blocks):  # vLLM would hold it waiting forever
            return
        params = SamplingParams(
            max_tokens=rec.max_tokens,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
            extra_args=request_metadata(trace),
        )
        self._by_id[rec.request_id] = index
        internal = self.engine.add_request(
            rec.request_id,
            {"prompt_token_ids": self.prompts[index]},
            params,
            priority=rec.priority,
        )
        self._by_id[internal] = index

    def _wrap_schedule(self) -> None:
        """See every ``SchedulerOutput``: first scheduling, cached tokens, preemptions."""
        sched, res, records = self.scheduler, self.result, self.records
        by_id = self._by_id
        schedule = sched.schedule
        last_computed: dict[str, int] = {}
        lost: dict[str, int] = {}

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter() - self.started
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
                    redone = max(0, lost.pop(rid) - c)
                    res.recomputed_tokens += redone
                    rec.recomputed_tokens += redone
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
    if spec.settings.kv_blocks is not None:
        # Same token capacity in the engine's block size, + vLLM's null block.
        tokens = spec.settings.kv_blocks * cfg.block_size
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
        gpu_memory_utilization=spec.settings.gpu_memory_utilization,
        seed=spec.workload.seed,
        disable_log_stats=False,
        **kwargs,
    )
