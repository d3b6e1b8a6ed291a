"""The contract driver's SGLang plugin (``schedkit_contract``), in SGLang's scheduler process.

``schedkit_sglang.harness.contract.run_sglang`` installs it (an ``sglang.srt.plugins``
entry point in the site directory it puts on the path) and sets ``CONTRACT_VAR`` to the
scenario's arrivals for the engine it starts; without that variable ``load`` registers
nothing. With it, through SGLang's ``HookRegistry``, the plugin

- holds each request in the scheduler until its arrival step, counted in SGLang's
  batches (``forward_ct``) plus the idle steps skipped, and gives the policies the
  simulator's step clock (``SglangEngineView.use_clock``: ``step_s`` per step, each
  request's arrival at the scenario's time);
- sets the policy facade's ``watch`` to the ``ContractRecorder``'s, so the recorder sees
  what SGLang shows the victim hook, as ``facade_of`` arranges it in-process;
- records every batch SGLang launches and the requests retracted or preempted while it
  was formed, independently of the adapter's step reports;
- adds all of it, with the recorder's observations and the KV pool's counts, to the
  scheduler's internal state (``Engine.get_server_info()``), where the driver reads it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from schedkit.testing.contract import ContractRecorder

__all__ = ["CONTRACT_VAR", "RECORDER", "STATE_KEY", "load"]

log = logging.getLogger("schedkit.sglang")

CONTRACT_VAR = "SCHEDKIT_SGLANG_CONTRACT"
"""The arrivals of the scenario being replayed (JSON), for the scheduler-side plugin."""
RECORDER = "contract-recorder"
STATE_KEY = "schedkit_contract"  # the plugin's entry in the scheduler's internal state
_WAIT_S = 30.0  # longest wait for a due request to reach the scheduler

_SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
_BATCH = "sglang.srt.managers.schedule_batch.ScheduleBatch"
_ADDER = "sglang.srt.managers.schedule_policy.PrefillAdder"


class _Contract:
    """Holds each request until its arrival step and records every batch SGLang
    launches, independently of the adapter's step reports."""

    def __init__(self, arrivals: Sequence[Sequence[Any]], step_s: float) -> None:
        self.order = [str(rid) for rid, _, _ in arrivals]  # arrival order
        self.step = {str(rid): int(step) for rid, step, _ in arrivals}
        self.arrival_s = {str(rid): float(at) for rid, _, at in arrivals}
        self.step_s = step_s
        self.attached = False
        self.held: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}
        self.released: set[str] = set()
        self.skipped = 0  # steps skipped while idle, as the simulator's clock jumps
        self.batches: list[dict[str, Any]] = []
        self.preempted: list[str] = []  # since the last batch launched
        self._preempt_mark = 0

    # -- arrivals -----------------------------------------------------------------

    def hold(
        self, original: Callable[..., Any], scheduler: Any, recv: Any, *a: Any, **k: Any
    ) -> Any:
        rid = str(getattr(recv, "rid", ""))
        if rid in self.step and rid not in self.released:
            self.held[rid] = (recv, a, k)
            return None
        return original(scheduler, recv, *a, **k)

    def steps(self, scheduler: Any) -> int:
        """Steps on the simulator's clock: batches SGLang ran plus idle steps skipped."""
        return int(scheduler.forward_ct) + self.skipped

    def attach(self, scheduler: Any) -> None:
        """Once, before any request arrives: policies see the simulator's clock
        (``step_s`` per step, arrivals at the scenario's arrival times, as the vLLM
        engine driver's ``use_clock``), and the recorder watches what the victim hook is
        shown (``PolicyFacade.watch``, as ``facade_of`` sets it in-process)."""
        self.attached = True
        runtime = getattr(scheduler, "schedkit", None)
        if runtime is None:
            return
        recorder = dict(runtime.facade.policies).get(RECORDER)
        if isinstance(recorder, ContractRecorder):
            runtime.facade.watch = recorder.watch

        def now() -> float:
            return self.step_s * self.steps(scheduler)

        def arrival(req: Any) -> float:
            return self.arrival_s.get(str(req.rid), now())

        runtime.engine.use_clock(now, arrival)

    def ingest(self, original: Callable[..., Any], scheduler: Any, *a: Any, **k: Any) -> Any:
        if not self.attached:
            self.attach(scheduler)
        received = original(scheduler, *a, **k)
        pending = [rid for rid in self.order if rid not in self.released]
        if not pending:
            return received
        now = self.steps(scheduler)
        first = self.step[pending[0]]
        if first > now and scheduler.is_fully_idle():
            self.skipped += first - now
            now = first
        due = [rid for rid in pending if self.step[rid] <= now]
        deadline = time.monotonic() + _WAIT_S
        while any(rid not in self.held for rid in due) and time.monotonic() < deadline:
            time.sleep(0.001)
            more = original(scheduler, *a, **k)
            if isinstance(received, list) and isinstance(more, list):
                received.extend(more)
        for rid in due:
            self.released.add(rid)
            entry = self.held.pop(rid, None)
            if entry is None:  # never arrived in time: let it in when it does
                log.warning("contract: %s did not reach the scheduler in time", rid)
                continue
            recv, args, kwargs = entry
            scheduler.handle_generate_request(recv, *args, **kwargs)
        return received

    # -- what SGLang ran ----------------------------------------------------------

    def launched(self, result: Any, scheduler: Any, batch: Any, *a: Any, **k: Any) -> None:
        mode = batch.forward_mode
        if mode.is_extend():
            tokens = {str(r.rid): int(r.extend_len) for r in batch.reqs}
        elif mode.is_decode():
            tokens = {str(r.rid): 1 for r in batch.reqs}
        else:
            tokens = {}
        preempted, self.preempted = self.preempted, []
        self.batches.append({"tokens": tokens, "preempted": preempted})

    def retracted(self, result: Any, *a: Any, **k: Any) -> None:
        self.preempted.extend(str(r.rid) for r in result[0])

    def before_preempt(self, adder: Any, *a: Any, **k: Any) -> None:
        self._preempt_mark = len(adder.preempt_list)

    def after_preempt(self, result: Any, adder: Any, *a: Any, **k: Any) -> None:
        self.preempted.extend(str(r.rid) for r in adder.preempt_list[self._preempt_mark :])

    # -- the readback -------------------------------------------------------------

    def state(self, output: Any, scheduler: Any, *a: Any, **k: Any) -> None:
        state = getattr(output, "internal_state", None)
        if not isinstance(state, dict):
            return
        runtime = getattr(scheduler, "schedkit", None)
        policies = dict(runtime.facade.policies) if runtime is not None else {}
        recorder = policies.get(RECORDER)
        allocator = scheduler.token_to_kv_pool_allocator
        state[STATE_KEY] = {
            "idle": bool(scheduler.is_fully_idle()) and not self.held,
            "held": sorted(self.held),
            "batches": self.batches,
            "recorder": _recorded(recorder) if isinstance(recorder, ContractRecorder) else None,
            "kv": {
                "total": int(allocator.size),
                "available": int(allocator.available_size()),
                "evictable": int(scheduler.tree_cache.evictable_size()),
                "page_size": int(getattr(scheduler, "page_size", 1) or 1),
            },
        }


def _recorded(rec: ContractRecorder) -> dict[str, Any]:
    return {
        "arrived": dict(rec.arrived),
        "reported": dict(rec.reported),
        "reports": rec.reports,
        "finished": rec.finished,
        "preempted": rec.preempted,
        "steps": rec.steps,
        "arrivals": rec.arrivals,
        "clocks": rec.clocks,
        "cached": rec.cached,
        "victim_calls": rec.victim_calls,
        "drifted": rec.drifted,
    }


def load() -> None:
    """The ``schedkit_contract`` SGLang plugin: registers nothing unless the driver set
    ``SCHEDKIT_SGLANG_CONTRACT`` for the engine it starts."""
    raw = os.environ.get(CONTRACT_VAR)
    if not raw:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    spec = json.loads(raw)
    contract = _Contract(spec["arrivals"], float(spec["step_s"]))
    hooks: list[tuple[str, Callable[..., Any], HookType]] = [
        (f"{_SCHEDULER}.handle_generate_request", contract.hold, HookType.AROUND),
        (f"{_SCHEDULER}.ingest_requests", contract.ingest, HookType.AROUND),
        (f"{_SCHEDULER}.run_batch", contract.launched, HookType.AFTER),
        (f"{_SCHEDULER}.get_internal_state", contract.state, HookType.AFTER),
        (f"{_BATCH}.retract_decode", contract.retracted, HookType.AFTER),
        (f"{_ADDER}.preempt_to_schedule", contract.before_preempt, HookType.BEFORE),
        (f"{_ADDER}.preempt_to_schedule", contract.after_preempt, HookType.AFTER),
    ]
    for target, hook, kind in hooks:
        HookRegistry.register(target, hook, kind)
