"""An SGLang plugin for benchmarks/speed/sglang/overhead.py: times the scheduler's own work.

Active only when ``SCHEDKIT_BENCH_TIMER`` names a file. When the scheduler's event loop
starts (after every plugin's patches are applied) it wraps that scheduler's
``ingest_requests``, ``get_next_batch_to_run``, ``process_batch_result`` and
``run_batch`` (the model forward) on the instance, outermost, and its
``SchedulePolicy.calc_priority``; it appends one JSON line per step with a batch
(``sched``: seconds of the three scheduler methods, ``forward``: ``run_batch``) and one
per ``calc_priority`` call (``order``: seconds, ``waiting``: queue length).

It also registers ``bench-finish-observer``, a schedkit policy for ``idle_cost.py``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from schedkit import Policy, RequestView, hookimpl

PATH_VAR = "SCHEDKIT_BENCH_TIMER"
TOGGLE_VAR = "SCHEDKIT_BENCH_TOGGLE"  # steps per block of schedkit's finish patch on / off


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

    flip = _finish_toggle(scheduler, int(os.environ.get(TOGGLE_VAR) or 0))

    def process_batch_result(batch: Any, *args: Any, **kwargs: Any) -> Any:
        result = process(batch, *args, **kwargs)
        line = {"sched": step["sched"], "forward": step["forward"], "bs": len(batch.reqs)}
        if flip is not None:
            line["patched"] = flip()
            line["extend"] = bool(batch.forward_mode.is_extend())
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


def _finish_toggle(scheduler: Any, block: int) -> Callable[[], bool] | None:
    """With ``block`` steps: switch schedkit's ``stream_output`` patch (its finish
    observer) off and on every ``block`` steps, by setting the streamer class's method
    (slotted instances take no attribute) to SGLang's own (the patch's ``__wrapped__``)
    or back to the patch, so one process compares its steps with and without it. The
    returned function, called once per step, says whether that step ran patched. Benchmark-only: requests that
    finish in an unpatched block are not reported to the policy."""
    if block <= 0:
        return None
    streamer = type(scheduler.output_streamer)
    patched = streamer.stream_output
    own = getattr(patched, "__wrapped__", None)
    if own is None:
        raise RuntimeError(f"{TOGGLE_VAR}: stream_output is not patched (no finish observer)")
    count = 0

    def flip() -> bool:
        nonlocal count
        on = (count // block) % 2 == 0
        count += 1
        if count % block == 0:  # the next block runs the other way
            streamer.stream_output = own if on else patched
        return on

    return flip


class FinishObserver(Policy):
    """``bench-finish-observer``: one hook, ``on_request_finished``, doing nothing. It
    makes the adapter patch SGLang's finish paths as ``sjf`` does, with no ordering, so
    ``idle_cost.py`` can price that patch alone."""

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        return None
