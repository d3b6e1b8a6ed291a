"""An SGLang plugin for benchmarks/sglang/overhead.py: times the scheduler's own work.

Active only when ``SCHEDKIT_BENCH_TIMER`` names a file. When the scheduler's event loop
starts (after every plugin's patches are applied) it wraps that scheduler's
``ingest_requests``, ``get_next_batch_to_run``, ``process_batch_result`` and
``run_batch`` (the model forward) on the instance, outermost, and its
``SchedulePolicy.calc_priority``; it appends one JSON line per step with a batch
(``sched``: seconds of the three scheduler methods, ``forward``: ``run_batch``) and one
per ``calc_priority`` call (``order``: seconds, ``waiting``: queue length).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

PATH_VAR = "SCHEDKIT_BENCH_TIMER"


def load() -> None:
    if not os.environ.get(PATH_VAR):
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(
        "sglang.srt.managers.scheduler.Scheduler.run_event_loop", _start, HookType.AROUND
    )


def _start(original: Any, scheduler: Any) -> Any:
    out = open(os.environ[PATH_VAR], "a", buffering=1)  # noqa: SIM115 (open for the loop)
    step: dict[str, float] = {"sched": 0.0, "forward": 0.0}

    def timed(fn: Any, key: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                step[key] += time.perf_counter() - started

        return wrapper

    ingest = timed(scheduler.ingest_requests, "sched")
    next_batch = timed(scheduler.get_next_batch_to_run, "sched")
    run_batch = timed(scheduler.run_batch, "forward")
    process = timed(scheduler.process_batch_result, "sched")

    def ingest_requests(*args: Any, **kwargs: Any) -> Any:
        step["sched"] = step["forward"] = 0.0  # a loop iteration starts here
        return ingest(*args, **kwargs)

    def process_batch_result(batch: Any, *args: Any, **kwargs: Any) -> Any:
        result = process(batch, *args, **kwargs)
        line = {"sched": step["sched"], "forward": step["forward"], "bs": len(batch.reqs)}
        out.write(json.dumps(line) + "\n")
        return result

    policy = scheduler.policy
    calc = policy.calc_priority

    def calc_priority(waiting: list[Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = calc(waiting, *args, **kwargs)
        seconds = time.perf_counter() - started
        out.write(json.dumps({"order": seconds, "waiting": len(waiting)}) + "\n")
        return result

    scheduler.ingest_requests = ingest_requests
    scheduler.get_next_batch_to_run = next_batch
    scheduler.run_batch = run_batch
    scheduler.process_batch_result = process_batch_result
    policy.calc_priority = calc_priority
    return original(scheduler)
