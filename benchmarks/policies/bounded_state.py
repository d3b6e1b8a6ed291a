"""Memory that the vtc policy keeps per tenant, and its decisions with bounded state (see
bounded_state.md).

    python benchmarks/policies/bounded_state.py                 # the memory table
    python benchmarks/policies/bounded_state.py --decisions     # expiry vs none, same run?

The memory table drives one ``vtc`` instance (default options) through the facade, one
request per tenant at a time: arrival, ``order_waiting``, a prefill step, 3 decode steps,
finish, 10 ms of engine clock per request. ``tracemalloc`` measures what is still
allocated once the facade and every request are gone, less what was allocated before the
policy was made: the policy's own state. Run it once against the tree as it was (a git
worktree of the old commit first on ``PYTHONPATH``) and once against the tree as it is.
It uses only hooks and options both versions have.

``--decisions`` replays two-tenant-flood at 4x (the proof workload of vtc.md), and the
same requests with the flood sent under 1,000 tenant ids in turn, with the default
options, with ``idle_s=0`` (every idle tenant dropped as soon as that loses nothing) and
with ``max_tenants=100`` too (evictions), and compares every request's scheduling,
first-token and finish times with the default arm's.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from schedkit_vtc import Ledger, VirtualTokenCounter

from schedkit import EngineState, PolicyFacade, RequestState, StepReport
from schedkit.bench.stats.metrics import latencies_ms
from schedkit.sim.engine import SimEngine
from schedkit.workload import TraceRequest

PROMPT, DECODES, STEP_S = 64, 3, 0.01


def drive(policy: VirtualTokenCounter, tenants: Iterator[str], idle_after_s: float) -> float:
    """Serve one request per tenant id, in turn; then, if ``idle_after_s``, a step that
    much later. Returns the engine clock at the end."""
    facade = PolicyFacade([("vtc", policy)])
    engine = EngineState(kv_blocks_total=1 << 20, block_size=16)
    for i, tenant in enumerate(tenants):
        request = RequestState(f"r{i}", PROMPT, DECODES + 1, tenant=tenant)
        request.arrival_time = engine.clock
        facade.admit(request, engine)
        engine.num_waiting = 1
        facade.order_waiting([request], engine)
        engine.num_waiting, engine.num_running = 0, 1
        request.num_computed_tokens = PROMPT
        request.num_output_tokens = 1
        engine.clock += STEP_S
        facade.step_finished(StepReport(1, STEP_S, PROMPT, 0, [request], [PROMPT]), engine)
        for _ in range(DECODES):
            request.num_computed_tokens += 1
            request.num_output_tokens += 1
        facade.step_finished(StepReport(DECODES, 0.0, 0, DECODES, [request], [DECODES]), engine)
        engine.num_running = 0
        facade.request_finished(request, "length", engine)
        del request, tenant
    if idle_after_s:
        engine.clock += idle_after_s
        facade.step_finished(StepReport(1, 0.0, 0, 0), engine)
    return engine.clock


def retained(
    make: Callable[[], Iterator[str]], idle_after_s: float = 0.0
) -> tuple[int, int, float]:
    """(bytes the policy keeps, tenants in its counters, host seconds) for one drive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        policy = VirtualTokenCounter()
        started = time.perf_counter()
        drive(policy, make(), idle_after_s)
        elapsed = time.perf_counter() - started
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
        tenants = len(policy.counters)
        del policy
    finally:
        tracemalloc.stop()
    return kept, tenants, elapsed


def distinct(n: int, pad: int = 0) -> Callable[[], Iterator[str]]:
    """``n`` distinct tenant ids, each ``pad`` characters longer than ``tenant-<i>``."""

    def make() -> Iterator[str]:
        return (f"tenant-{i}" + "x" * pad for i in range(n))

    return make


def memory_table() -> None:
    cases = [
        ("10,000 distinct tenants, 1 request each", distinct(10_000), 0.0),
        ("the same, then a step 301 s later", distinct(10_000), 301.0),
        ("100,000 distinct tenants, 1 request each", distinct(100_000), 0.0),
        ("100 distinct tenant ids of 1 MiB, 1 request each", distinct(100, 1 << 20), 0.0),
    ]
    print("| case | retained | tenants kept | host time |")
    print("|---|---:|---:|---:|")
    for label, make, idle_after_s in cases:
        kept, tenants, elapsed = retained(make, idle_after_s)
        print(f"| {label} | {kept / 1e6:,.2f} MB | {tenants:,} | {elapsed:.2f} s |")


class CountingLedger(Ledger):
    """Counts the tenant entries it drops (expired or evicted)."""

    dropped = 0

    def _drop(self, key: str) -> None:
        self.dropped += 1
        super()._drop(key)


def replay(
    bench: Any, requests: Sequence[TraceRequest], options: dict[str, Any]
) -> tuple[list[tuple[Any, ...]], int, float]:
    """(every request's schedule, first token and finish; tenant entries dropped; the
    quiet tenant's p90 TTFT in ms) for one vtc replay."""
    policy = VirtualTokenCounter(**options)
    opts = policy.options
    ledger = policy.ledger = CountingLedger(
        opts.weights, idle_s=opts.idle_s, max_tenants=opts.max_tenants
    )
    facade = PolicyFacade([("vtc", policy)], strict=True)
    run = SimEngine(requests, bench.cost, bench.sim_config, facade).run()
    times = [(r.request_id, r.scheduled_s, r.first_token_s, r.finish_s) for r in run.records]
    quiet = [latencies_ms(r)["ttft_ms"] for r in run.records if r.tenant == "quiet"]
    p90 = float(np.percentile([t for t in quiet if t is not None], 90))  # as the bench's
    return times, ledger.dropped, p90


def decisions() -> None:
    from schedkit.bench.runner import Bench, BenchSpec

    bench = Bench(BenchSpec(workload="two-tenant-flood", policies=["vtc"], rate_scale=4.0))
    flood = bench.workload(4.0).requests
    # The same requests, the flood sent under 1,000 tenant ids in turn: tenants come and go.
    churn = [
        dataclasses.replace(r, tenant=f"flood-{i % 1000}") if r.tenant == "flood" else r
        for i, r in enumerate(flood)
    ]
    arms: tuple[tuple[str, dict[str, Any]], ...] = (
        ("default", {}),
        ("idle_s=0", {"idle_s": 0.0}),
        ("idle_s=0, max_tenants=100", {"idle_s": 0.0, "max_tenants": 100}),
    )
    print(
        "| workload | options | tenant entries dropped | quiet p90 TTFT | same decisions as default |"
    )
    print("|---|---|---:|---:|---|")
    for name, requests in (("two-tenant-flood x4", flood), ("flood under 1,000 ids", churn)):
        reference = None
        for label, options in arms:
            times, dropped, p90 = replay(bench, requests, options)
            reference = reference or times
            same = "yes" if times == reference else "**no**"
            print(f"| {name} | {label} | {dropped:,} | {p90:,.0f} ms | {same} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--decisions", action="store_true", help="compare decisions with and without expiry"
    )
    args = parser.parse_args()
    if args.decisions:
        decisions()
    else:
        memory_table()


if __name__ == "__main__":
    main()
