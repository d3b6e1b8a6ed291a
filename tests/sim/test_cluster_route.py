"""A cluster routed in batches (``Cluster.route``, as a plan's probe watches its run) is
the cluster run in one go, request for request."""

from __future__ import annotations

import pytest

from schedkit import PolicyFacade
from schedkit.sim.cluster import Cluster
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.workload import load_workload


def cluster(policy: str, replicas: int) -> Cluster:
    workload = load_workload("mooncake-conv").truncated(400).scaled(0.5)
    cost, _, _ = make_cost_model("Llama-3-8B", "H100-SXM", 1, None)
    config = SimConfig(
        num_blocks=8_000, block_size=16, hash_block_tokens=workload.hash_block_tokens
    )
    facades = [PolicyFacade.from_config(policy) for _ in range(replicas)]
    return Cluster(workload.requests, cost, config, facades, PolicyFacade.from_config(policy))


@pytest.mark.parametrize(("policy", "replicas"), [("fcfs", 1), ("fcfs", 3), ("least-loaded", 3)])
def test_routing_in_batches_is_the_run_in_one_go(policy: str, replicas: int) -> None:
    whole = cluster(policy, replicas).run()
    batched = cluster(policy, replicas)
    for upto in (1, 7, 7, 150, 399):  # a batch may be empty
        batched.route(upto)
        assert len(batched.records) == len(batched.placement) == upto
        assert [batched.placement.count(i) for i in range(replicas)] == batched.routed
    run = batched.run()
    assert run.records == whole.records and run.routed == whole.routed
    assert (run.steps, run.duration_s, run.itl) == (whole.steps, whole.duration_s, whole.itl)
    assert sum(run.routed) == len(batched.placement) == 400
