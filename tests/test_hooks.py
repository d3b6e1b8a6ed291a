"""One or more tests per hook, each named ``test_hook_<hook>_...``, proving the facade
drives that hook as hookspecs.py documents (tests/test_docs.py checks the names)."""

from __future__ import annotations

from typing import Any

import pytest
from _policies import make_blocks, make_requests, raising, scripted

from schedkit import (
    Admission,
    BatchBudget,
    EngineState,
    EngineView,
    PolicyFacade,
    ReplicaState,
    RequestView,
    StepReport,
)
from schedkit.decisions import ADMIT

DEFAULT = BatchBudget(token_budget=2048, max_running=16, prefill_chunk=512)

# -- admit_request ----------------------------------------------------------------------


def test_hook_admit_request_rejection_reason_reaches_caller(engine: EngineState) -> None:
    [request] = make_requests(1)
    policy = scripted(admit_request=Admission.reject("queue full"))
    facade = PolicyFacade([("cap", policy)])

    decision = facade.admit(request, engine)

    assert decision == Admission(admitted=False, reason="queue full")
    assert policy.calls_to("admit_request") == [(request, engine)]
    assert not facade.errors


def test_hook_admit_request_admits_when_policy_has_no_opinion(engine: EngineState) -> None:
    [request] = make_requests(1)
    facade = PolicyFacade([("quiet", scripted(admit_request=None))])
    assert facade.admit(request, engine) is ADMIT


def test_hook_admit_request_admission_passes_through(engine: EngineState) -> None:
    [request] = make_requests(1)
    facade = PolicyFacade([("yes", scripted(admit_request=Admission.admit()))])
    assert facade.admit(request, engine).admitted


# -- order_waiting ----------------------------------------------------------------------


def test_hook_order_waiting_permutation_is_applied(engine: EngineState) -> None:
    waiting = make_requests(4)
    policy = scripted(order_waiting=lambda w, e: list(reversed(w)))
    facade = PolicyFacade([("reverse", policy)])

    order = facade.order_waiting(waiting, engine)

    assert order == waiting[::-1]
    assert all(a is b for a, b in zip(order or [], waiting[::-1], strict=True))
    [(seen, seen_engine)] = policy.calls_to("order_waiting")
    assert seen is waiting and seen_engine is engine


def test_hook_order_waiting_not_called_for_an_empty_queue(engine: EngineState) -> None:
    policy = scripted(order_waiting=lambda w, e: list(w))
    facade = PolicyFacade([("p", policy)])
    assert facade.order_waiting([], engine) is None
    assert policy.calls == []


def test_hook_order_waiting_none_keeps_engine_order(engine: EngineState) -> None:
    facade = PolicyFacade([("p", scripted(order_waiting=None))])
    assert facade.order_waiting(make_requests(3), engine) is None


# -- plan_batch -------------------------------------------------------------------------


def test_hook_plan_batch_tightened_budget_is_returned(engine: EngineState) -> None:
    tighter = BatchBudget(token_budget=512, max_running=4, prefill_chunk=128)
    policy = scripted(plan_batch=tighter)
    facade = PolicyFacade([("small", policy)])

    assert facade.plan_batch(engine, DEFAULT) == tighter
    assert policy.calls_to("plan_batch") == [(engine, DEFAULT)]
    assert not facade.errors


def test_hook_plan_batch_budget_equal_to_default_is_allowed(engine: EngineState) -> None:
    same = BatchBudget(token_budget=2048, max_running=16, prefill_chunk=512)
    facade = PolicyFacade([("same", scripted(plan_batch=same))], strict=True)
    assert facade.plan_batch(engine, DEFAULT) == same


@pytest.mark.parametrize(
    "looser",
    [
        BatchBudget(token_budget=4096, max_running=16, prefill_chunk=512),
        BatchBudget(token_budget=2048, max_running=17, prefill_chunk=512),
        BatchBudget(token_budget=2048, max_running=16, prefill_chunk=1024),
        BatchBudget(token_budget=2048, max_running=16, prefill_chunk=0),  # lifts the cap
    ],
    ids=["token_budget", "max_running", "prefill_chunk", "prefill_chunk-uncapped"],
)
def test_hook_plan_batch_loosened_budget_is_refused(
    engine: EngineState, looser: BatchBudget
) -> None:
    facade = PolicyFacade([("greedy", scripted(plan_batch=looser))])

    assert facade.plan_batch(engine, DEFAULT) is DEFAULT
    assert facade.errors == {("greedy", "plan_batch"): 1}


def test_hook_plan_batch_refused_budget_falls_back_to_next_policy(engine: EngineState) -> None:
    tighter = BatchBudget(token_budget=1024, max_running=8, prefill_chunk=256)
    looser = BatchBudget(token_budget=10_000, max_running=16, prefill_chunk=512)
    facade = PolicyFacade(
        [("greedy", scripted(plan_batch=looser)), ("ok", scripted(plan_batch=tighter))]
    )

    assert facade.plan_batch(engine, DEFAULT) == tighter
    assert facade.errors == {("greedy", "plan_batch"): 1}


# -- select_victims ---------------------------------------------------------------------


def test_hook_select_victims_returns_victims_in_order(engine: EngineState) -> None:
    running = make_requests(5)
    needing = running[0]
    victims = [running[2], running[4], running[1]]
    policy = scripted(select_victims=victims)
    facade = PolicyFacade([("v", policy)])

    assert facade.select_victims(running, needing, engine) == victims
    [(seen_running, seen_needing, seen_engine)] = policy.calls_to("select_victims")
    assert (seen_running, seen_needing, seen_engine) == (running, needing, engine)


def test_hook_select_victims_may_name_the_needing_request(engine: EngineState) -> None:
    running = make_requests(3)
    facade = PolicyFacade([("self", scripted(select_victims=lambda r, n, e: [n]))], strict=True)
    assert facade.select_victims(running, running[1], engine) == [running[1]]


def test_hook_select_victims_not_running_is_refused(engine: EngineState) -> None:
    running = make_requests(3)
    [stranger] = make_requests(1)
    facade = PolicyFacade([("v", scripted(select_victims=[stranger]))])
    assert facade.select_victims(running, running[0], engine) is None
    assert facade.errors == {("v", "select_victims"): 1}


# -- select_evictions -------------------------------------------------------------------


def test_hook_select_evictions_with_enough_blocks(engine: EngineState) -> None:
    candidates = make_blocks(6)
    chosen = [candidates[5], candidates[3]]
    policy = scripted(select_evictions=chosen)
    facade = PolicyFacade([("e", policy)])

    assert facade.select_evictions(candidates, 2, engine) == chosen
    assert policy.calls_to("select_evictions") == [(candidates, 2, engine)]


def test_hook_select_evictions_more_than_needed_is_allowed(engine: EngineState) -> None:
    candidates = make_blocks(4)
    facade = PolicyFacade([("e", scripted(select_evictions=lambda c, n, e: c[::-1]))], strict=True)
    assert facade.select_evictions(candidates, 1, engine) == candidates[::-1]


def test_hook_select_evictions_too_few_blocks_is_refused(engine: EngineState) -> None:
    candidates = make_blocks(6)
    facade = PolicyFacade([("e", scripted(select_evictions=candidates[:1]))])
    assert facade.select_evictions(candidates, 2, engine) is None
    assert facade.errors == {("e", "select_evictions"): 1}


# -- route_request ----------------------------------------------------------------------


def test_hook_route_request_first_answer_picks_the_replica(engine: EngineState) -> None:
    request = make_requests(1)[0]
    replicas = [ReplicaState(i, engine) for i in range(3)]
    silent, picker = scripted(route_request=None), scripted(route_request=2)
    facade = PolicyFacade([("silent", silent), ("picker", picker)])
    assert facade.route(request, replicas) == 2
    assert picker.calls_to("route_request") == [(request, replicas)]
    assert facade.route(request, []) is None  # no cluster, nothing to route


@pytest.mark.parametrize("answer", [3, -1, True, 1.0, "1"])
def test_hook_route_request_no_replica_index_is_a_fault(engine: EngineState, answer: Any) -> None:
    replicas = [ReplicaState(i, engine) for i in range(3)]
    facade = PolicyFacade([("r", scripted(route_request=answer))])
    assert facade.route(make_requests(1)[0], replicas) is None  # the cluster's default
    assert facade.errors == {("r", "route_request"): 1}


def test_hook_route_request_builtins(engine: EngineState) -> None:
    request = make_requests(1)[0]
    busy, idle = EngineState(100, 16), EngineState(100, 16)
    busy.num_waiting = 3
    replicas = [ReplicaState(0, busy), ReplicaState(1, idle), ReplicaState(2, idle)]
    rr = PolicyFacade.from_config("round-robin")
    assert [rr.route(request, replicas) for _ in range(4)] == [0, 1, 2, 0]
    assert PolicyFacade.from_config("least-loaded").route(request, replicas) == 1


def test_hook_route_request_power_of_two_is_rays_default() -> None:
    """Two replicas drawn at random, the less loaded of them chosen: never the busiest
    of three unless drawn with an equal, every idle one chosen over a run, the same
    choices for the same seed."""
    request = make_requests(1)[0]
    busy = EngineState(100, 16)
    busy.num_waiting = 5
    replicas = [ReplicaState(0, busy), ReplicaState(1, EngineState(100, 16)),
                ReplicaState(2, EngineState(100, 16))]  # fmt: skip
    p2 = PolicyFacade.from_config("power-of-two")
    chosen = [p2.route(request, replicas) for _ in range(60)]
    assert 0 not in chosen and set(chosen) == {1, 2}
    again = PolicyFacade.from_config("power-of-two")
    assert [again.route(request, replicas) for _ in range(60)] == chosen
    assert p2.route(request, replicas[:1]) == 0


# -- waiting_key ------------------------------------------------------------------------


def test_hook_waiting_key_combines_policies_in_configured_order(engine: EngineState) -> None:
    waiting = make_requests(4)
    for i, r in enumerate(waiting):
        r.priority, r.tenant = (1, 0, 1, 0)[i], "bbaa"[i]
    by_priority = scripted(waiting_key=lambda r, e: r.priority)
    by_tenant = scripted(waiting_key=lambda r, e: r.tenant)
    facade = PolicyFacade([("priority", by_priority), ("tenant", by_tenant)])

    keys = [facade.waiting_key(r, engine) for r in waiting]
    order = sorted(range(4), key=lambda i: (keys[i], i))  # the engine's order breaks ties

    assert order == [3, 1, 2, 0]  # priority 0 first; within it tenant "a" before "b"
    assert by_priority.calls_to("waiting_key")[0] == (waiting[0], engine)
    assert not facade.errors


def test_hook_waiting_key_none_ranks_after_every_key(engine: EngineState) -> None:
    waiting = make_requests(3)
    policy = scripted(waiting_key=lambda r, e: None if r is waiting[0] else 5)
    facade = PolicyFacade([("p", policy)])
    keys = [facade.waiting_key(r, engine) for r in waiting]
    assert keys[1] == keys[2] < keys[0]  # type: ignore[operator]
    assert not facade.errors


def test_hook_waiting_key_nan_is_a_fault_ranked_as_none(engine: EngineState) -> None:
    waiting = make_requests(2)
    facade = PolicyFacade([("p", scripted(waiting_key=lambda r, e: float("nan")))])
    quiet = PolicyFacade([("p", scripted(waiting_key=None))])
    assert facade.waiting_key(waiting[0], engine) == quiet.waiting_key(waiting[0], engine)
    facade.waiting_key(waiting[1], engine)
    assert facade.errors == {("p", "waiting_key"): 2}


def test_hook_waiting_key_not_implemented_gives_none(engine: EngineState) -> None:
    facade = PolicyFacade([("p", scripted(order_waiting=None))])
    assert facade.waiting_key(make_requests(1)[0], engine) is None


# -- victim_key -------------------------------------------------------------------------


def test_hook_victim_key_lower_is_preempted_first(engine: EngineState) -> None:
    running = make_requests(3)
    for r, computed in zip(running, (300, 10, 80), strict=True):
        r.num_computed_tokens = computed
    facade = PolicyFacade([("least", scripted(victim_key=lambda r, e: r.num_computed_tokens))])
    ranked = sorted(running, key=lambda r: facade.victim_key(r, engine) or ())
    assert [r.num_computed_tokens for r in ranked] == [10, 80, 300]


def test_hook_victim_key_raising_is_counted_and_ranked_as_none(engine: EngineState) -> None:
    [request] = make_requests(1)
    facade = PolicyFacade([("bad", scripted(victim_key=raising(RuntimeError("x"))))])
    quiet = PolicyFacade([("bad", scripted(victim_key=None))])
    assert facade.victim_key(request, engine) == quiet.victim_key(request, engine)
    assert facade.errors == {("bad", "victim_key"): 1}


# -- eviction_key -----------------------------------------------------------------------


def test_hook_eviction_key_orders_blocks(engine: EngineState) -> None:
    blocks = make_blocks(4)
    for block, hits in zip(blocks, (3, 0, 2, 0), strict=True):
        block.num_hits = hits
    lfu = scripted(eviction_key=lambda b, e: (b.num_hits, b.last_access))
    facade = PolicyFacade([("lfu", lfu)])
    ranked = sorted(range(4), key=lambda i: (facade.eviction_key(blocks[i], engine) or (), i))
    assert [blocks[i].num_hits for i in ranked] == [0, 0, 2, 3]


def test_hook_eviction_key_object_is_a_fault(engine: EngineState) -> None:
    facade = PolicyFacade([("bad", scripted(eviction_key=lambda b, e: object()))])
    facade.eviction_key(make_blocks(1)[0], engine)
    assert facade.errors == {("bad", "eviction_key"): 1}


# -- observation ------------------------------------------------------------------------


def test_hook_on_request_arrived_sees_every_arrival_before_admission(
    engine: EngineState,
) -> None:
    [request] = make_requests(1)
    calls: list[str] = []

    def reject(request: RequestView, engine: EngineView) -> Admission:
        calls.append("admit")
        return Admission.reject("full")

    gate = scripted(admit_request=reject)
    watcher = scripted(on_request_arrived=lambda r, e: calls.append("arrived"))
    # The watcher is configured after the admission policy that answers: it still sees it.
    facade = PolicyFacade([("gate", gate), ("watcher", watcher)])

    assert facade.sees_arrivals and facade.has_arrival_observer
    assert not facade.admit(request, engine).admitted
    assert calls == ["arrived", "admit"]
    assert watcher.calls_to("on_request_arrived") == [(request, engine)]


def test_hook_on_request_arrived_raising_does_not_stop_admission(engine: EngineState) -> None:
    [request] = make_requests(1)
    facade = PolicyFacade([("broken", scripted(on_request_arrived=raising(KeyError("x"))))])

    assert not facade.has_admit and facade.sees_arrivals
    assert facade.admit(request, engine) is ADMIT
    assert facade.errors == {("broken", "on_request_arrived"): 1}


def test_hook_on_step_finished_all_policies_called_even_when_one_raises(
    engine: EngineState,
) -> None:
    report = StepReport(num_steps=3, duration_s=0.03, num_prefill_tokens=0, num_decode_tokens=6)
    first = scripted(on_step_finished=None)
    broken = scripted(on_step_finished=raising(RuntimeError("boom")))
    last = scripted(on_step_finished="ignored")
    facade = PolicyFacade([("first", first), ("broken", broken), ("last", last)])

    facade.step_finished(report, engine)

    for policy in (first, broken, last):
        assert policy.calls_to("on_step_finished") == [(report, engine)]
    assert facade.errors == {("broken", "on_step_finished"): 1}


def test_hook_on_request_finished_all_policies_called_even_when_one_raises(
    engine: EngineState,
) -> None:
    [request] = make_requests(1)
    broken = scripted(on_request_finished=raising(ValueError("bad")))
    last = scripted(on_request_finished=None)
    facade = PolicyFacade([("broken", broken), ("last", last)])

    for _ in range(3):
        facade.request_finished(request, "rejected", engine)

    assert last.calls_to("on_request_finished") == [(request, "rejected", engine)] * 3
    assert len(broken.calls_to("on_request_finished")) == 3
    assert facade.errors == {("broken", "on_request_finished"): 3}
