"""vtc's state is bounded: idle tenants expire without changing a decision, at most
``max_tenants`` are kept and never an active one, and long tenant ids are not retained."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Sequence
from typing import Any

from schedkit import EngineState, PolicyFacade, RequestState, StepReport
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test
from schedkit.workload import TraceRequest

from schedkit_vtc import (
    OVERFLOW_TENANT,
    TENANT_KEY_CHARS,
    Ledger,
    VirtualTokenCounter,
    tenant_key,
)

NAME = "vtc"


class Engine:
    """Drives one policy by hand, on an engine clock the test moves."""

    def __init__(self, policy: VirtualTokenCounter) -> None:
        self.policy = policy
        self.state = EngineState(kv_blocks_total=1024, block_size=16)

    def at(self, clock: float) -> Engine:
        self.state.clock = clock
        return self

    def arrive(self, request_id: str, tenant: str, prompt: int = 64) -> RequestState:
        request = RequestState(request_id, prompt, 16, tenant=tenant)
        self.policy.admit_request(request)
        return request

    def order(self, waiting: Sequence[RequestState]) -> list[str]:
        return [r.request_id for r in self.policy.order_waiting(waiting, self.state)]

    def compute(self, request: RequestState, n: int) -> None:
        """``request`` is scheduled and computes ``n`` tokens in one step."""
        request.num_computed_tokens += n
        report = StepReport(1, 0.01, n, 0, [request], [n])
        self.policy.on_step_finished(report, self.state)

    def step(self) -> None:
        """A step in which the given requests computed nothing (time passes)."""
        self.policy.on_step_finished(StepReport(1, 0.01, 0, 0), self.state)

    def finish(self, request: RequestState) -> None:
        self.policy.on_request_finished(request, self.state)


# --- keys -------------------------------------------------------------------------


def test_long_tenant_ids_are_stored_as_bounded_distinct_keys() -> None:
    short = "t" * (TENANT_KEY_CHARS - 1)
    assert tenant_key(short) is short
    a, b = "x" * 500 + "a", "x" * 500 + "b"  # same prefix, different ids
    assert len(tenant_key(a)) == len(tenant_key(b)) == TENANT_KEY_CHARS
    assert tenant_key(a) != tenant_key(b)
    assert tenant_key(a) == tenant_key("x" * 500 + "a")  # stable
    assert tenant_key(short + "y") != short + "y"  # 128 characters: hashed
    assert OVERFLOW_TENANT not in {tenant_key(OVERFLOW_TENANT), tenant_key("(vtc overflow)")}


def test_a_weight_configured_for_a_long_id_applies() -> None:
    long = "premium-" * 40
    policy = VirtualTokenCounter(weights={long: 2.0})
    engine = Engine(policy)
    request = engine.arrive("r", long, 100)
    engine.compute(request, 100)
    assert policy.counters == {tenant_key(long): 50.0}


def test_one_mib_tenant_ids_are_not_kept() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        policy = VirtualTokenCounter()
        engine = Engine(policy)
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            tenant = f"{i:03d}" + "x" * (1 << 20)
            first = engine.arrive(f"r{i}", tenant)
            second = engine.arrive(f"s{i}", tenant)
            assert engine.order([first, second]) == [f"r{i}", f"s{i}"]
            engine.compute(first, 64)
            engine.finish(first)  # the tenant stays active: its second request waits
            del tenant, first, second
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(policy.counters) == 100
    assert all(len(key) <= TENANT_KEY_CHARS for key in policy.counters)
    assert retained < 512 * 1024, f"{retained:,} bytes retained for 100 tenants"


# --- the cap ------------------------------------------------------------------------


def test_100_000_distinct_tenants_leave_at_most_max_tenants_entries() -> None:
    policy = VirtualTokenCounter()  # max_tenants 10,000; the clock never moves: no expiry
    engine = Engine(policy)
    for i in range(100_000):
        request = engine.arrive(f"r{i}", f"tenant-{i}")
        engine.compute(request, 64)
        engine.finish(request)
    assert len(policy.counters) == 10_000
    assert "tenant-99999" in policy.counters and "tenant-0" not in policy.counters
    ledger = policy.ledger
    assert not ledger.waiting and not ledger._key_of and not ledger._live


def test_a_flood_of_fresh_tenants_cannot_push_out_an_active_tenant() -> None:
    policy = VirtualTokenCounter(max_tenants=4)
    engine = Engine(policy)
    honest = engine.arrive("h1", "honest", 500)
    engine.compute(honest, 300)  # running, mid-prefill: active, nothing waiting
    counter = policy.counters["honest"]
    waiting = []
    for i in range(1000):  # fresh ids that come and go
        request = engine.arrive(f"f{i}", f"flood-{i}")
        engine.compute(request, 64)
        engine.finish(request)
    for i in range(1000, 2000):  # fresh ids that stay waiting: entries fill up
        waiting.append(engine.arrive(f"f{i}", f"flood-{i}"))
    assert len(policy.counters) == 4 + 1  # the honest tenant, 3 flood ids, the overflow
    assert policy.counters["honest"] == counter
    assert OVERFLOW_TENANT in policy.counters
    # The honest tenant's next request is served among the first of the 5 keys' heads,
    # not after the 997 flood requests that share the overflow key.
    waiting.append(engine.arrive("h2", "honest"))
    assert engine.order(waiting).index("h2") < 5


def test_the_overflow_is_one_tenant_among_the_others() -> None:
    policy = VirtualTokenCounter(max_tenants=2)
    engine = Engine(policy)
    waiting = [engine.arrive(f"a{i}", "a") for i in range(3)]
    waiting += [engine.arrive(f"b{i}", "b") for i in range(3)]
    waiting += [engine.arrive(f"x{i}", f"fresh-{i}") for i in range(3)]
    assert engine.order(waiting) == ["a0", "b0", "x0", "a1", "b1", "x1", "a2", "b2", "x2"]


# --- idle expiry --------------------------------------------------------------------


def returning_tenant(idle_s: float) -> tuple[list[list[str]], VirtualTokenCounter, bool]:
    """Tenant ``a`` is served, idles past ``idle_s``, comes back; ``b`` stays busy.
    Returns the orders, the policy, and whether ``a`` was tracked before it came back."""
    policy = VirtualTokenCounter(idle_s=idle_s)
    engine = Engine(policy)
    orders = []
    a1, b1 = engine.at(0.0).arrive("a1", "a"), engine.arrive("b1", "b")
    orders.append(engine.order([a1, b1]))
    engine.compute(a1, 64)
    b2 = engine.arrive("b2", "b")
    engine.compute(b1, 64)
    engine.at(1.0).finish(a1)  # a is idle from t=1
    engine.compute(b2, 64)  # b2 runs on: b stays active, ahead of a
    engine.at(5.0).compute(b2, 200)
    engine.at(20.0).step()
    tracked = "a" in policy.counters
    b3, a2 = engine.arrive("b3", "b"), engine.arrive("a2", "a")
    orders.append(engine.order([a2, b3]))
    return orders, policy, tracked


def test_an_idle_tenant_expires_after_idle_s_and_returns_at_the_lift() -> None:
    kept, never, tracked = returning_tenant(idle_s=1e6)
    assert tracked
    dropped, expiring, tracked = returning_tenant(idle_s=10.0)
    assert not tracked  # idle 19 s: dropped
    assert kept == dropped  # the same decisions
    assert never.counters == expiring.counters
    assert expiring.counters["a"] == expiring.counters["b"] > 64  # lifted, not 0
    # it goes once idle_s has passed, not before
    policy = VirtualTokenCounter(idle_s=10.0)
    engine = Engine(policy)
    a1, b1 = engine.at(0.0).arrive("a1", "a"), engine.arrive("b1", "b")
    engine.compute(a1, 64)
    engine.compute(b1, 64)
    engine.at(1.0).finish(a1)
    engine.at(10.5).step()
    assert "a" in policy.counters  # idle 9.5 s
    engine.at(11.0).step()
    assert "a" not in policy.counters and "b" in policy.counters


def test_an_idle_tenant_served_past_the_others_is_kept_until_they_catch_up() -> None:
    # Dropping an idle tenant whose counter is above the others' would forgive the
    # service it had beyond them: VTC lifts with max(counter, floor), it does not reset.
    orders = {}
    for idle_s in (0.0, 1e6):
        policy = VirtualTokenCounter(idle_s=idle_s)
        engine = Engine(policy)
        a1, b1 = engine.at(0.0).arrive("a1", "a", 10_000), engine.arrive("b1", "b")
        engine.compute(a1, 10_000)  # a: 10,000; b still waits at 0
        engine.at(1.0).finish(a1)
        engine.compute(b1, 64)  # b: 64, running
        engine.at(50.0).step()
        assert policy.counters["a"] == 10_000  # idle 49 s, but ahead of b: kept
        b2, a2 = engine.arrive("b2", "b"), engine.arrive("a2", "a")  # b first: a lifts to b
        orders[idle_s] = engine.order([a2, b2])  # a2 first on a tie
        assert policy.counters["a"] == 10_000
    assert orders[0.0] == orders[1e6] == ["b2", "a2"]


def test_an_indebted_idle_tenant_goes_once_the_others_pass_it() -> None:
    policy = VirtualTokenCounter(idle_s=5.0)
    engine = Engine(policy)
    a1, b1 = engine.at(0.0).arrive("a1", "a", 1000), engine.arrive("b1", "b", 5000)
    engine.compute(a1, 1000)
    engine.at(1.0).finish(a1)
    engine.compute(b1, 600)
    engine.at(10.0).step()
    assert "a" in policy.counters  # b at 600 < a's 1,000
    engine.compute(b1, 600)
    assert "a" not in policy.counters  # b at 1,200: a returning is lifted past 1,000


def test_an_indebted_tenant_coming_back_over_and_over_leaves_no_trail() -> None:
    policy = VirtualTokenCounter(idle_s=0.0)
    engine = Engine(policy)
    engine.arrive("b1", "b")  # waits throughout at 0: the bound stays 0
    for i in range(5000):
        a = engine.at(float(i)).arrive(f"a{i}", "a")
        engine.compute(a, 64)
        engine.finish(a)
        c = engine.arrive(f"c{i}", "c")
        engine.compute(c, 1)  # c leaves last: a is not the floor
        engine.finish(c)
        engine.at(i + 0.5).step()  # a ripens, indebted: kept
    assert policy.counters["a"] == 5000 * 64
    assert len(policy.ledger._ripe_heap) < 100  # not one entry per time a went idle


def test_the_tenant_that_left_last_is_kept_as_the_floor() -> None:
    policy = VirtualTokenCounter(idle_s=0.0)
    engine = Engine(policy)
    a1 = engine.arrive("a1", "a", 700)
    engine.compute(a1, 700)
    engine.at(1.0).finish(a1)
    engine.at(100.0).step()
    assert policy.ledger.last_left == "a" and "a" in policy.counters
    engine.arrive("b1", "b")
    assert policy.counters["b"] == 700  # lifted to it, as without expiry


# --- on the simulated engine ----------------------------------------------------------

TEN_MS = LinearCostModel(c0=0.01, c_prefill=0.00001, c_decode=0.0, c_kv=0.0)


def churn(seed: int) -> list[TraceRequest]:
    """40 tenants sending bursts with idle gaps, prompts of very different lengths, on
    an engine that queues: tenants go idle indebted or not, and come back."""
    rng = random.Random(seed)
    requests = []
    for i in range(600):
        tenant = f"t{rng.randrange(40)}"
        prompt = rng.choice((16, 64, 256, 1024))
        arrival = rng.uniform(0.0, 30.0)
        requests.append(TraceRequest(f"r{i}", arrival, prompt, rng.randint(1, 24), tenant=tenant))
    return sorted(requests, key=lambda r: r.arrival_s)


class NaiveLedger(Ledger):
    """Drops every tenant idle for idle_s, whatever its counter: what not to do."""

    def floor_bound(self) -> float:
        return float("inf")


def sim(policy: VirtualTokenCounter, requests: list[TraceRequest]) -> RunResult:
    facade = PolicyFacade([(NAME, policy)], strict=True)
    config = SimConfig(num_blocks=256, max_num_seqs=3)
    return SimEngine(requests, TEN_MS, config, facade, check_invariants=True).run()


def decisions(run: RunResult) -> list[tuple[Any, ...]]:
    return [(r.request_id, r.scheduled_s, r.first_token_s, r.finish_s) for r in run.records]


def test_expiry_changes_no_decision_where_a_naive_one_would() -> None:
    for seed in range(3):
        requests = churn(seed)
        never = VirtualTokenCounter(idle_s=1e6)
        eager = VirtualTokenCounter(idle_s=0.0)
        naive = VirtualTokenCounter(idle_s=0.0)
        naive.ledger = NaiveLedger({}, idle_s=0.0)
        reference = decisions(sim(never, requests))
        assert decisions(sim(eager, requests)) == reference
        assert decisions(sim(naive, requests)) != reference, "the workload must need the bound"
        assert len(eager.counters) < len(never.counters) == 40


def test_a_small_cap_on_the_simulated_engine_serves_everyone() -> None:
    policy = VirtualTokenCounter(max_tenants=5)
    run = sim(policy, churn(0))
    assert all(r.finish_reason == "length" for r in run.records)
    assert run.policy_errors == 0
    assert len(policy.counters) <= 5 + 1
    ledger = policy.ledger
    assert not ledger.waiting and not ledger._key_of and not ledger._live


# --- the conformance kit, with bounds that bite -------------------------------------

test_conformance_bounded = conformance_test(
    NAME, {"idle_s": 0.0, "max_tenants": 2}, max_examples=100
)
