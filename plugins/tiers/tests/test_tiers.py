"""tiers: classes, order, victims, the batch caps, progress and shedding, one hook at a
time; the engine contract; then in the simulated engine, online beside a batch backlog."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from schedkit import (
    BatchBudget,
    EngineState,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    RequestView,
    StepReport,
)
from schedkit.bench.stats.metrics import meets_slo
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_tiers import Tiers

NAME = "tiers"
DEFAULT = BatchBudget(token_budget=8192, max_running=8)


def request(
    request_id: str, *, priority: int = 0, tenant: str = "default", arrival: float = 0.0
) -> RequestState:
    return RequestState(request_id, 100, 16, arrival_time=arrival, tenant=tenant, priority=priority)


def ids(requests: Sequence[RequestView]) -> list[str]:
    return [r.request_id for r in requests]


def engine(running: int = 0, free: float = 1.0, clock: float = 0.0) -> EngineState:
    state = EngineState(kv_blocks_total=1000, block_size=16)
    state.num_running, state.kv_blocks_free, state.clock = running, int(1000 * free), clock
    return state


def step(*scheduled: tuple[RequestView, int], preempted: Sequence[RequestView] = ()) -> StepReport:
    return StepReport(
        num_steps=1,
        duration_s=0.01,
        num_prefill_tokens=sum(n for _, n in scheduled),
        num_decode_tokens=0,
        scheduled=[r for r, _ in scheduled],
        num_scheduled_tokens=[n for _, n in scheduled],
        preempted=preempted,
    )


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-tiers"
    assert entry.load() is Tiers


def test_offline_by_priority_or_tenant() -> None:
    policy = Tiers(offline_priority=2, offline_tenants=("batch",))
    assert not policy.offline(request("a", priority=1))
    assert policy.offline(request("b", priority=2))
    assert policy.offline(request("c", priority=0, tenant="batch"))


def test_online_waits_ahead_of_offline_each_in_the_engine_order() -> None:
    policy = Tiers()
    queue = [
        request("off-1", priority=1),
        request("on-1"),
        request("off-2", priority=1),
        request("on-2"),
    ]
    assert ids(policy.order_waiting(queue, engine())) == ["on-1", "on-2", "off-1", "off-2"]


def test_offline_is_preempted_first_then_the_newest() -> None:
    policy = Tiers()
    running = [
        request("on-old", arrival=1.0),
        request("off-old", priority=1, arrival=2.0),
        request("on-new", arrival=3.0),
        request("off-new", priority=1, arrival=4.0),
    ]
    ranked = sorted(running, key=lambda r: policy.victim_key(r, engine()))
    assert ids(ranked) == ["off-new", "off-old", "on-new", "on-old"]


def test_while_online_waits_only_online_requests_start() -> None:
    policy = Tiers()
    for r in (request("on-1"), request("on-2"), request("off", priority=1)):
        policy.on_request_arrived(r)
    assert policy.plan_batch(engine(running=3), DEFAULT) == BatchBudget(8192, 5)


def test_offline_starts_only_into_headroom() -> None:
    policy = Tiers(kv_headroom=0.2, seat_headroom=0.25)
    policy.on_request_arrived(request("off", priority=1))
    assert policy.plan_batch(engine(running=2), DEFAULT) == BatchBudget(8192, 6)  # 75% of 8
    assert policy.plan_batch(engine(running=6), DEFAULT) == BatchBudget(8192, 6)  # seats full
    assert policy.plan_batch(engine(running=2, free=0.2), DEFAULT) == BatchBudget(8192, 2)
    assert policy.plan_batch(engine(running=0, free=0.1), DEFAULT) == BatchBudget(8192, 1)


def test_small_steps_while_online_runs_and_none_waits() -> None:
    policy = Tiers(offline_step_tokens=256, offline_min_share=0.0)
    online, offline = request("on"), request("off", priority=1)
    policy.on_request_arrived(online)
    policy.on_request_arrived(offline)
    policy.on_step_finished(step((online, 100)), engine())  # online runs, offline waits
    assert policy.plan_batch(engine(running=1), DEFAULT) == BatchBudget(256 + 1, 6)
    policy.on_request_finished(online)  # no online left: full steps
    assert policy.plan_batch(engine(running=0), DEFAULT) == BatchBudget(8192, 6)
    policy.on_step_finished(step((offline, 100)), engine())
    assert policy.plan_batch(engine(running=1), DEFAULT) is None  # nothing waits


def test_idle_steps_capped_with_idle_step_tokens() -> None:
    """Without online work the offline step is capped at idle_step_tokens (an online
    arrival waits for at most that step); with online decoding, offline_step_tokens."""
    policy = Tiers(offline_step_tokens=32, idle_step_tokens=512, offline_min_share=0.0)
    offline = request("off", priority=1)
    policy.on_request_arrived(offline)
    policy.on_step_finished(step((offline, 512)), engine())
    assert policy.plan_batch(engine(running=1), DEFAULT) == BatchBudget(512 + 1, 8)
    online = request("on")
    policy.on_request_arrived(online)
    policy.on_step_finished(step((online, 100), (offline, 32)), engine())
    assert policy.plan_batch(engine(running=2), DEFAULT) == BatchBudget(32 + 2, 8)


def timed(seconds: float, *scheduled: tuple[RequestView, int]) -> StepReport:
    report = step(*scheduled)
    report.duration_s = seconds
    return report


def test_the_step_cap_adapts_to_the_tightest_online_tpot_target() -> None:
    policy = Tiers(offline_step_tokens=512, tpot_fill=0.8, offline_min_share=0.0)
    strict, loose = request("strict"), request("loose")
    strict.slo_tpot_ms, loose.slo_tpot_ms = 50.0, 200.0
    offline = request("off", priority=1)
    for r in (strict, loose, offline):
        policy.on_request_arrived(r)
    policy.on_step_finished(timed(0.01, (strict, 100), (loose, 100)), engine())
    assert policy.plan_batch(engine(running=2), DEFAULT) == BatchBudget(512 + 2, 6)
    policy.on_step_finished(timed(0.045, (offline, 512)), engine())  # over 0.8 x 50 ms
    assert policy.step_tokens == 256
    policy.plan_batch(engine(running=3), DEFAULT)
    policy.on_step_finished(timed(0.02), engine())  # well under: grows by an eighth
    assert policy.step_tokens == 288
    policy.on_request_finished(strict)  # the loose target alone: 160 ms
    policy.plan_batch(engine(running=2), DEFAULT)
    policy.on_step_finished(timed(0.1), engine())
    assert policy.step_tokens == 324
    policy.on_request_finished(loose)  # no online left: full steps, no adapting
    assert policy.plan_batch(engine(running=1), DEFAULT) is None
    policy.on_step_finished(timed(1.0), engine())
    assert policy.step_tokens == 324


def test_a_fixed_step_cap_without_tpot_fill() -> None:
    policy = Tiers(offline_step_tokens=512, tpot_fill=0.0, offline_min_share=0.0)
    online = request("on")
    online.slo_tpot_ms = 10.0
    policy.on_request_arrived(online)
    policy.on_request_arrived(request("off", priority=1))
    policy.on_step_finished(step((online, 10)), engine())
    policy.plan_batch(engine(running=1), DEFAULT)
    policy.on_step_finished(timed(1.0), engine())
    assert policy.step_tokens == 512


def test_a_preempted_request_waits_again() -> None:
    policy = Tiers()
    online = request("on")
    policy.on_request_arrived(online)
    policy.on_step_finished(step((online, 100)), engine())
    assert policy.online_waiting == 0
    policy.on_step_finished(step(preempted=[online]), engine())
    assert policy.online_waiting == 1


def test_offline_below_its_share_gets_its_oldest_request_served_as_online() -> None:
    policy = Tiers(offline_min_share=0.1)
    old, new = (
        request("off-old", priority=1, arrival=1.0),
        request("off-new", priority=1, arrival=2.0),
    )
    online = request("on", arrival=3.0)
    for r in (new, old, online):
        policy.on_request_arrived(r)
    policy.on_step_finished(step((online, 1000)), engine(clock=4.0))  # online took it all
    order = policy.order_waiting([new, old], engine(clock=4.0))
    assert ids(order) == ["off-old", "off-new"]
    assert policy.promoted == {"off-old"}
    assert policy.victim_key(old, engine()) > policy.victim_key(new, engine())
    policy.order_waiting([new, old], engine(clock=4.1))
    assert policy.promoted == {"off-old"}  # one at a time while a promoted one waits
    # it starts as online would, but in the small steps of offline work
    assert policy.plan_batch(engine(running=1), DEFAULT) == BatchBudget(512 + 1, 2)
    policy.on_request_finished(old)
    assert policy.promoted == set()


def test_offline_past_its_wait_limit_is_served_as_online() -> None:
    policy = Tiers(offline_max_wait_s=10.0, offline_min_share=0.0)
    early, late = (
        request("early", priority=1, arrival=0.0),
        request("late", priority=1, arrival=5.0),
    )
    online = request("on", arrival=6.0)
    for r in (early, late, online):
        policy.on_request_arrived(r)
    assert ids(policy.order_waiting([online, early, late], engine(clock=9.0))) == [
        "on",
        "early",
        "late",
    ]
    assert ids(policy.order_waiting([online, early, late], engine(clock=12.0))) == [
        "on",
        "early",
        "late",
    ]
    assert policy.promoted == {"early"}
    policy.order_waiting([online, early, late], engine(clock=15.0))
    assert policy.promoted == {"early", "late"}


def test_offline_is_shed_under_overload_online_never() -> None:
    policy = Tiers(shed_offline_at_waiting=50)
    busy = engine()
    busy.num_waiting = 50
    verdict = policy.admit_request(request("off", priority=1), busy)
    assert verdict is not None and not verdict.admitted and verdict.code == "offline_shed"
    assert policy.admit_request(request("on"), busy) is None
    busy.num_waiting = 49
    assert policy.admit_request(request("off", priority=1), busy) is None
    assert Tiers().admit_request(request("off", priority=1), busy) is None  # off by default


def test_nothing_is_kept_for_requests_that_left() -> None:
    policy = Tiers(offline_min_share=1.0)
    rs = [request(f"r{i}", priority=i % 2, arrival=float(i)) for i in range(100)]
    for r in rs:
        policy.on_request_arrived(r)
    policy.order_waiting(rs, engine(clock=1.0))
    for r in rs:
        policy.on_request_finished(r)
    assert (policy.waiting, policy.promoted, policy.online_live) == ({}, set(), {})
    assert policy.online_waiting == 0


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="kv_headroom"):
        Tiers(kv_headroom=1.5)
    with pytest.raises(ValueError, match="shed_offline_at_waiting"):
        Tiers(shed_offline_at_waiting=0)


test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_shedding = conformance_test(
    NAME, {"shed_offline_at_waiting": 2, "offline_max_wait_s": 0.5}, max_examples=50
)
test_contract = contract_test(NAME)  # on every engine installed here


# -- in the simulated engine ---------------------------------------------------------

COST = LinearCostModel(c0=0.005, c_prefill=2e-5, c_decode=5e-4, c_kv=0.0)


def mixed() -> list[TraceRequest]:
    """A backlog of 200 long batch prompts at 0 s; an interactive request every 50 ms."""
    backlog = [
        TraceRequest(f"off-{i:03d}", 0.0, 2000, 8, tenant="offline", priority=1) for i in range(200)
    ]
    online = [
        TraceRequest(
            f"on-{i:03d}", 0.05 * i, 200, 32, tenant="online", slo_ttft_ms=200.0, slo_tpot_ms=40.0
        )
        for i in range(200)
    ]
    return sorted(backlog + online, key=lambda r: r.arrival_s)


def replay(requests: list[TraceRequest], config: Any) -> RunResult:
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=4096, max_num_seqs=32, max_num_batched_tokens=4096)
    return SimEngine(requests, COST, sim, facade, check_invariants=True).run()


def attainment(run: RunResult) -> float:
    online = [r for r in run.records if r.tenant == "online"]
    return sum(meets_slo(r, None, None) for r in online) / len(online)


def test_online_holds_its_slo_beside_a_backlog_that_still_finishes() -> None:
    requests = mixed()
    alone = attainment(replay([r for r in requests if r.tenant == "online"], "fcfs"))
    runs = {name: replay(requests, name) for name in ("fcfs", "priority", NAME)}
    assert alone == 1.0
    assert attainment(runs[NAME]) >= alone - 0.01
    assert attainment(runs["fcfs"]) < 0.5
    assert attainment(runs["priority"]) < 0.9  # its prefills stretch online decodes
    done = [r for r in runs[NAME].records if r.tenant == "offline" and r.finish_reason == "length"]
    assert len(done) == 200
