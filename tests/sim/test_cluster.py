"""The simulated cluster (schedkit/sim/cluster.py): one replica is the single engine,
step for step; routing decides where requests go, and every request finishes once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from schedkit import Policy, PolicyFacade, ReplicaView, RequestView, hookimpl
from schedkit.policies.builtin import LeastLoaded
from schedkit.sim.cluster import Cluster
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.sim.engine import SimEngine
from schedkit.workload import load_workload


def setup(n: int = 400, blocks: int = 8_000) -> tuple[Any, Any, SimConfig]:
    workload = load_workload("mooncake-conv").truncated(n).scaled(0.5)
    cost, _, _ = make_cost_model("Llama-3-8B", "H100-SXM", 1, None)
    config = SimConfig(
        num_blocks=blocks, block_size=16, hash_block_tokens=workload.hash_block_tokens
    )
    return workload, cost, config


def cluster(policy: str, replicas: int, **kw: Any) -> Cluster:
    workload, cost, config = setup(**kw)
    facades = [PolicyFacade.from_config(policy) for _ in range(replicas)]
    return Cluster(workload.requests, cost, config, facades, PolicyFacade.from_config(policy))


def test_one_replica_is_the_single_engine_step_for_step() -> None:
    workload, cost, config = setup()
    alone = SimEngine(workload.requests, cost, config, PolicyFacade.from_config("fcfs")).run()
    one = cluster("fcfs", 1).run()
    assert [r.finish_s for r in one.records] == [r.finish_s for r in alone.records]
    assert [r.cached_tokens for r in one.records] == [r.cached_tokens for r in alone.records]
    assert (one.steps, one.preemptions, one.prefix_hit_tokens) == (
        alone.steps, alone.preemptions, alone.prefix_hit_tokens,
    )  # fmt: skip
    assert one.routed == [len(workload.requests)]


@pytest.mark.parametrize("policy", ["fcfs", "round-robin", "least-loaded"])
def test_every_request_finishes_once_on_some_replica(policy: str) -> None:
    c = cluster(policy, 4)
    run = c.run()
    assert sum(run.routed) == len(run.records) == 400
    assert all(r.finish_reason == "length" for r in run.records)
    assert len({r.request_id for r in run.records}) == 400
    for engine in c.replicas:
        assert engine.kv.num_free == engine.kv.num_blocks  # every block given back
    if policy in ("fcfs", "round-robin"):  # the default is round-robin too
        assert run.routed == [100, 100, 100, 100]


def test_least_loaded_balances_and_a_faulty_router_falls_back_to_round_robin() -> None:
    loads: list[tuple[int, list[int]]] = []

    class Checked(LeastLoaded):
        @hookimpl
        def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
            chosen = super().route_request(request, replicas)
            loads.append((chosen, [r.engine.num_running + r.engine.num_waiting for r in replicas]))
            return chosen

    workload, cost, config = setup(blocks=2_000)  # small caches: queues form
    facades = [PolicyFacade.from_config("fcfs") for _ in range(4)]
    Cluster(workload.requests, cost, config, facades, PolicyFacade([("c", Checked())])).run()
    assert all(load[chosen] == min(load) for chosen, load in loads)
    assert any(max(load) > min(load) for _, load in loads)  # there was a choice to make

    class Broken(Policy):
        @hookimpl
        def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Any:
            return len(replicas)  # one past the last

    workload, cost, config = setup()
    router = PolicyFacade([("broken", Broken())])
    c = Cluster(workload.requests, cost, config, [PolicyFacade.from_config("fcfs")] * 2, router)
    run = c.run()
    assert run.routed == [200, 200]
    assert run.policy_errors_by_hook == {"broken.route_request": 400}


def test_the_router_sees_each_replicas_cache_and_load() -> None:
    seen: list[tuple[int, ...]] = []

    class Watch(Policy):
        @hookimpl
        def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
            seen.append(tuple(r.cached_tokens(request) for r in replicas))
            with pytest.raises(AttributeError, match="read-only"):
                replicas[0].index = 5  # type: ignore[misc]
            return 0  # everything to replica 0: only it ever caches anything

    workload, cost, config = setup()
    router = PolicyFacade([("watch", Watch())])
    facades = [PolicyFacade.from_config("fcfs") for _ in range(2)]
    run = Cluster(workload.requests, cost, config, facades, router).run()
    assert run.routed == [400, 0]
    assert any(a > 0 for a, _ in seen) and all(b == 0 for _, b in seen)
    assert sum(r.cached_tokens for r in run.records) > 0
