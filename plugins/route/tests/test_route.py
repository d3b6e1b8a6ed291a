"""prefix-affinity: scores, choices, the conformance kit, and the A/B on a cluster."""

from __future__ import annotations

from schedkit import EngineState, PolicyFacade, ReplicaState, RequestState
from schedkit.testing import conformance_test, contract_test

from schedkit_route import PrefixAffinity, scores

test_conformance = conformance_test("prefix-affinity", max_examples=150)


def request(prompt: int = 1025) -> RequestState:
    return RequestState("q", prompt, 16)


def engine(waiting: int = 0, free: int = 100) -> EngineState:
    e = EngineState(100, 16)
    e.num_waiting, e.kv_blocks_free = waiting, free
    return e


def test_the_replica_holding_the_prefix_wins_when_loads_are_equal() -> None:
    r = request()
    replicas = [ReplicaState(0, engine()), ReplicaState(1, engine(), {"q": 512})]
    assert scores(r, replicas, 3.0, 2.0, 0.0) == [2.0, 3.0 * 0.5 + 2.0]
    assert PolicyFacade([("p", PrefixAffinity())]).route(r, replicas) == 1


def test_load_outweighs_a_small_prefix_and_ties_go_to_the_shorter_queue() -> None:
    r = request()
    replicas = [ReplicaState(0, engine(waiting=8), {"q": 256}), ReplicaState(1, engine())]
    # 3 x 0.25 + 0 (the longest queue) < 0 + 2 (the shortest)
    assert PolicyFacade([("p", PrefixAffinity())]).route(r, replicas) == 1
    heavy = PrefixAffinity(prefix_weight=10.0)
    assert PolicyFacade([("p", heavy)]).route(r, replicas) == 0
    same = [ReplicaState(0, engine(waiting=2)), ReplicaState(1, engine(waiting=1))]
    assert PolicyFacade([("p", PrefixAffinity(queue_weight=0.0))]).route(r, same) == 1


def test_kv_weight_prefers_free_blocks() -> None:
    r = request()
    replicas = [ReplicaState(0, engine(free=10)), ReplicaState(1, engine(free=90))]
    assert PolicyFacade([("p", PrefixAffinity(kv_weight=1.0))]).route(r, replicas) == 1


def test_on_a_cluster_it_hits_the_prefix_cache_more_than_round_robin() -> None:
    from schedkit.bench.runner import Bench, BenchSpec, run_on_sim

    bench = Bench(
        BenchSpec(
            workload="mooncake-conv", max_requests=1500, replicas=4,
            policies=["round-robin", "prefix-affinity"],
        )
    )  # fmt: skip
    rr, pa = (run_on_sim(bench, i, 1.0) for i in range(2))
    assert sum(rr.routed) == sum(pa.routed) == 1500
    assert pa.prefix_hit_tokens > 1.2 * rr.prefix_hit_tokens


test_contract = contract_test("prefix-affinity")  # on every engine installed here
