"""Real-engine A/B: each arm on an in-process ``sglang.Engine``, timed by the wall clock.

``schedkit bench --engine sglang --model DIR ...`` starts one ``sglang.Engine`` per arm
with the arm's config selected through the environment (``config_environ``; the scheduler
process it spawns loads the schedkit plugin and reads it), submits each request of the
workload with ``async_generate(stream=True)`` when the wall clock reaches its arrival
time, and waits for every stream to end. What every real engine measures the same way
(clipping, prompts, the wall clock, the KV pre-check, rejections, token gaps) is
``schedkit.bench.engines.real_arm``; what is SGLang's, in seconds from the start of the replay:

- ``arrival_s``: a request is submitted when the replay's event loop reaches it (later
  while the loop is busy reading outputs), and that delay counts toward its TTFT.
- ``scheduled_s``: when the scheduler first put the request in a forward batch: the
  ``forward_entry_time`` of its time stats (the scheduler process's ``perf_counter``,
  the same monotonic clock on Linux) read from the batches of outputs, clamped between
  arrival and first token. SGLang ships those stats only for requests whose
  ``time_stats.has_timing_data`` is set: the bench sets ``SCHEDKIT_SGLANG_TIMING=1``, and
  the plugin marks every request (``enable_metrics`` would too, but cannot start a second
  Engine in one process).
- ``first_token_s``, each later token and ``finish_s``: when the replay received the
  streamed output carrying it; outputs queued while the replay was busy arrive together.
- Rejections: a stream ending with ``finish_reason`` type ``abort`` and a message
  ``"rejected: why"`` (the plugin's admission decision).
- ``cached_tokens`` and ``preemptions`` are SGLang's ``cached_tokens`` (capped at the
  prompt) and ``num_retractions``; recomputed tokens are not observed and stay 0.
- The timeline and KV usage come from SGLang's load snapshots (running and waiting
  requests, token usage), published every step and sampled every ``LOAD_POLL_S``.
- ``steps``, ``policy_errors`` and ``policy_errors_by_hook``: the policies run in SGLang's
  scheduler process, so this process's facade (which only names the arm) never sees a
  fault. After the replay they are read from the scheduler through SGLang's
  internal-state readback (``Engine.get_server_info()``, where the plugin adds
  ``schedkit``: ``SglangRuntime.internal_state``), summed over the schedulers that
  answer (one per data-parallel rank); ``steps`` is SGLang's count of batches run.

Engine settings: ``--max-num-seqs`` is ``max_running_requests``,
``--max-num-batched-tokens`` is ``chunked_prefill_size``, ``--kv-blocks`` x
``--block-size`` is ``max_total_tokens`` (on CPU ``CPU_KV_TOKENS`` when not given),
``--no-prefix-caching`` disables the radix cache. The KV capacity is SGLang's
``max_total_num_tokens`` (``engine.real.kv_tokens``).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schedkit.bench.engines.real_arm import RealArm
from schedkit.bench.engines.requests import ModelInfo, request_metadata
from schedkit.records import RequestRecord, RunResult

from schedkit_sglang import cpu
from schedkit_sglang.config import TIMING_VAR, config_environ, scoped_environ

if TYPE_CHECKING:
    from schedkit.bench.spec import PreparedBench

__all__ = ["CPU_KV_TOKENS", "RealEngine", "SchedulerCounters", "run_real_arm", "scheduler_counters"]

log = logging.getLogger("schedkit.sglang")

CPU_KV_TOKENS = 16384  # KV pool on CPU without --kv-blocks (SGLang would size it from RAM)
LOAD_POLL_S = 0.01  # how often the replay reads SGLang's load snapshot


def run_real_arm(bench: PreparedBench, index: int, rate_scale: float) -> RunResult:
    """``schedkit.engines`` entry point ``sglang``: one arm on a real in-process SGLang."""
    return RealEngine.run_arm(bench, index, rate_scale)


class RealEngine(RealArm):
    """One replay of the bench's workload on a fresh ``sglang.Engine`` with arm ``index``.

    The engine starts in ``run``; policies run in SGLang's scheduler process, so
    ``facade`` only names the arm."""

    engine_name = "sglang"

    def __init__(
        self, bench: PreparedBench, index: int, rate_scale: float, info: ModelInfo
    ) -> None:
        super().__init__(bench, index, rate_scale, info)
        self.kwargs = engine_kwargs(bench, info, self.max_model_len)
        self.engine: Any = None
        self.capacity_tokens = 0
        self._entered: dict[str, float] = {}  # rid -> forward_entry_time (perf_counter)

    def close(self) -> None:
        """Shut the engine's processes down before the next arm starts one."""
        engine, self.engine = self.engine, None
        if engine is None:
            return
        try:
            engine.shutdown()
        except Exception:  # pragma: no cover - best effort
            log.debug("engine shutdown failed", exc_info=True)
        atexit.unregister(engine.shutdown)
        del engine
        gc.collect()

    # -- the replay ------------------------------------------------------------------

    def run(self) -> RunResult:
        self.engine = _start_engine(self.bench, self.index, self.kwargs)
        info = self.engine.get_server_info()
        self.capacity_tokens = int(info.get("max_total_num_tokens") or 0)
        self.real_info["kv_tokens"] = self.capacity_tokens
        self._watch_scheduling()
        self.started = time.perf_counter()
        self.engine.loop.run_until_complete(self._replay())
        end = self.clock()
        counters = scheduler_counters(self.engine.get_server_info())
        result = self.finish_run(end, counters.steps)
        result.policy_errors = counters.policy_errors
        result.policy_errors_by_hook = counters.policy_errors_by_hook
        result.slow_hook_calls = counters.slow_hook_calls
        return result

    async def _replay(self) -> None:
        sampler = asyncio.ensure_future(self._sample_load())
        streams: list[asyncio.Future[None]] = []
        try:
            for i, trace in enumerate(self.traces):
                delay = trace.arrival_s - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                streams.append(asyncio.ensure_future(self._request(i)))
            await asyncio.gather(*streams)
        finally:
            sampler.cancel()
            for stream in streams:
                stream.cancel()

    async def _request(self, index: int) -> None:
        rec = self.records[index]
        if not self.fits_kv(rec, self.capacity_tokens // self.block_size):
            return  # SGLang could never hold it
        params = {
            "max_new_tokens": rec.max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "custom_params": request_metadata(self.traces[index]),
        }
        try:
            stream: AsyncIterator[dict[str, Any]] = await self.engine.async_generate(
                input_ids=self.prompts[index],
                sampling_params=params,
                stream=True,
                priority=rec.priority,
                rid=rec.request_id,
            )
            async for out in stream:
                self.on_output(rec, out.get("meta_info") or {}, self.clock())
        except Exception as exc:  # the engine refused or lost it: count it, keep replaying
            log.warning("--engine sglang: request %s failed: %s", rec.request_id, exc)
        if rec.finish_reason == "":
            rec.finish_reason, rec.finish_s = "aborted", self.clock()

    def on_output(self, rec: RequestRecord, meta: Mapping[str, Any], clock: float) -> None:
        """Record one streamed output of ``rec`` (its ``meta_info``) received at ``clock``."""
        if rec.finish_reason:
            return
        entered = self._entered.get(rec.request_id)
        if rec.scheduled_s is None and entered is not None:
            rec.scheduled_s = min(max(entered - self.started, rec.arrival_s), clock)
        self.record_tokens(rec, int(meta.get("completion_tokens") or 0), clock)
        reason = meta.get("finish_reason")
        if reason is None:
            return
        kind = reason.get("type", "") if isinstance(reason, Mapping) else str(reason)
        message = reason.get("message", "") if isinstance(reason, Mapping) else ""
        if self.end(rec, kind or "stop", message, clock) and rec.first_token_s is not None:
            res = self.result  # it was scheduled
            rec.cached_tokens = min(int(meta.get("cached_tokens") or 0), rec.prompt_tokens)
            rec.preemptions = int(meta.get("num_retractions") or 0)
            res.preemptions += rec.preemptions
            res.prefix_query_tokens += rec.prompt_tokens
            res.prefix_hit_tokens += rec.cached_tokens

    def _watch_scheduling(self) -> None:
        """Note when the scheduler first batched each request, from the time stats that
        come with every batch of outputs, before the streams see those outputs."""
        from sglang.srt.managers.io_struct import unwrap_from_pickle

        manager = self.engine.tokenizer_manager
        handle = manager._handle_batch_output
        entered = self._entered

        async def handle_batch_output(batch: Any) -> None:
            batch.time_stats = unwrap_from_pickle(batch.time_stats)  # as handle does first
            for rid, stats in zip(batch.rids, batch.time_stats or (), strict=False):
                t = float(getattr(stats, "forward_entry_time", 0.0) or 0.0)
                if t > 0.0:
                    entered.setdefault(rid, t)
            await handle(batch)

        manager._handle_batch_output = handle_batch_output

    async def _sample_load(self) -> None:
        """Timeline and time-weighted KV usage from SGLang's published load snapshots."""
        reader = getattr(self.engine.tokenizer_manager, "load_snapshot_reader", None)
        if reader is None:
            return
        last, usage = self.clock(), 0.0
        while True:
            await asyncio.sleep(LOAD_POLL_S)
            try:
                snapshots = reader.read_all()
            except Exception as exc:  # no timeline rather than no result
                log.warning("--engine sglang: cannot read SGLang's load snapshot: %s", exc)
                return
            now = self.clock()
            self.recorder.kv_usage(now - last, usage)
            last = now
            if snapshots:
                usage = sum(float(s.token_usage) for s in snapshots) / len(snapshots)
                waiting = sum(int(s.num_waiting_reqs) for s in snapshots)
                running = sum(int(s.num_running_reqs) for s in snapshots)
                self.recorder.sample(now, waiting, running, usage)


@dataclass(slots=True)
class SchedulerCounters:
    """What SGLang's schedulers counted for schedkit (``SglangRuntime.internal_state``)."""

    steps: int = 0
    policy_errors: int = 0
    policy_errors_by_hook: dict[str, int] = field(default_factory=dict)
    slow_hook_calls: dict[str, int] = field(default_factory=dict)


def scheduler_counters(server_info: Mapping[str, Any]) -> SchedulerCounters:
    """The schedkit counters in ``Engine.get_server_info()``, summed over its schedulers;
    zeros where the plugin added none (no schedkit config)."""
    counters = SchedulerCounters()
    for state in server_info.get("internal_states") or ():
        ours = state.get("schedkit") if isinstance(state, Mapping) else None
        if not isinstance(ours, Mapping):
            continue
        counters.steps += int(ours.get("steps") or 0)
        counters.policy_errors += int(ours.get("policy_errors") or 0)
        for key, summed in (
            ("policy_errors_by_hook", counters.policy_errors_by_hook),
            ("slow_hook_calls", counters.slow_hook_calls),
        ):
            for hook, count in (ours.get(key) or {}).items():
                summed[str(hook)] = summed.get(str(hook), 0) + int(count)
    return counters


def on_cpu() -> bool:
    """Whether SGLang runs on CPU here: asked for, or no CUDA device."""
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        return True
    import torch

    return not torch.cuda.is_available()


def engine_kwargs(bench: PreparedBench, info: ModelInfo, max_model_len: int) -> dict[str, Any]:
    """``sglang.Engine`` arguments for the bench's engine settings."""
    cfg, spec = bench.sim_config, bench.spec
    kwargs: dict[str, Any] = {
        "model_path": str(info.path),
        "skip_tokenizer_init": True,
        "context_length": max_model_len,
        "max_running_requests": cfg.max_num_seqs,
        "chunked_prefill_size": max(cfg.max_num_batched_tokens, 1),
        "disable_radix_cache": not cfg.enable_prefix_caching,
        "schedule_policy": "fcfs",  # stock order under the arm's policies
        "random_seed": spec.workload.seed,
        "load_snapshot_publish_interval": 1,  # running/waiting/KV usage after every step
        "log_level": "warning",
    }
    if spec.settings.kv_blocks is not None:
        kwargs["max_total_tokens"] = spec.settings.kv_blocks * cfg.block_size
    if on_cpu():
        kwargs.setdefault("max_total_tokens", CPU_KV_TOKENS)
        kwargs.update(cpu.ENGINE_ARGS)
    return kwargs


def _start_engine(bench: PreparedBench, index: int, kwargs: dict[str, Any]) -> Any:
    """``sglang.Engine(**kwargs)`` with arm ``index``'s config in the environment its
    processes start with; this process's environment is restored afterwards."""
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    env.update(config_environ(bench.configs[index]))
    env[TIMING_VAR] = "1"  # the scheduler returns each request's forward-entry time
    if kwargs.get("device") == "cpu":
        cpu.install()
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        env["PYTHONPATH"] = cpu.pythonpath(os.environ.get("PYTHONPATH", ""))
    with scoped_environ(env):
        import sglang

        return sglang.Engine(**kwargs)
