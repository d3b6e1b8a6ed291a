"""The two-client fairness attack on ``vtc``, before and after a trust config (trust.md).

    python benchmarks/policies/trust_fairness.py [--per-client 400] [--seeds 0 1 2]

Two clients with equal load (same request count, lengths and arrival process), both
backlogged: an honest one whose body says ``tenant: honest``, and an attacker whose body
claims a fresh tenant id on every request. Printed: the attacker's share of the first half
of completions (by finish time) under ``vtc``, for

- ``believed``: the body's tenant reaches the policy (what every engine did before
  ``schedkit.trust``; on the simulator, ``trust.trace = "trusted"``);
- ``header``: the default trust config, each client's gateway sending its own
  ``x-tenant-id`` (``honest``, ``attacker``): the body's claims are ignored;
- ``no header``: the default trust config with the trace's tenants as body claims and no
  header (``trust.trace = "body"``): both clients are ``default``, one tenant, so ``vtc``
  serves them in arrival order.
"""

from __future__ import annotations

import argparse
import dataclasses
import random

from schedkit import PolicyFacade, load_config
from schedkit.bench.runner import trusted_requests
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model
from schedkit.sim.engine import SimEngine
from schedkit.trust import TrustConfig
from schedkit.workload import TraceRequest

COST = RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
SIM = SimConfig(num_blocks=4096, max_num_seqs=32)


def two_clients(per_client: int, seed: int) -> tuple[list[TraceRequest], dict[str, str]]:
    """The workload (body tenants as the clients wrote them) and request id -> client."""
    rng = random.Random(f"schedkit-trust:{seed}")
    requests, client = [], {}
    t = 0.0
    for i in range(per_client):
        prompt, output = rng.randint(256, 768), rng.randint(64, 192)
        for name, tenant in (("honest", "honest"), ("attacker", f"anon-{seed}-{i:06d}")):
            t += rng.expovariate(400.0)  # far above capacity: both stay backlogged
            rid = f"{name}-{i:06d}"
            requests.append(TraceRequest(rid, t, prompt, output, tenant=tenant))
            client[rid] = name
    return requests, client


def attacker_share(requests: list[TraceRequest], client: dict[str, str]) -> float:
    run = SimEngine(requests, COST, SIM, PolicyFacade.from_config("vtc")).run()
    done = sorted((r for r in run.records if r.finish_s is not None), key=lambda r: r.finish_s)
    first = done[: len(done) // 2]
    return sum(client[r.request_id] == "attacker" for r in first) / len(first)


def arms(per_client: int, seed: int) -> dict[str, float]:
    requests, client = two_clients(per_client, seed)
    believed = trusted_requests(requests, load_config("vtc").trust)
    trust = TrustConfig()
    header = []
    for r in requests:  # the gateway's header for each client, the body's claim ignored
        meta, problems = trust.resolve(client[r.request_id], {"tenant": r.tenant}, None)
        assert not problems
        header.append(dataclasses.replace(r, tenant=meta.tenant, priority=meta.priority))
    no_header = trusted_requests(requests, TrustConfig(trace="body"))
    return {
        "believed": attacker_share(list(believed), client),
        "header": attacker_share(header, client),
        "no header": attacker_share(list(no_header), client),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-client", type=int, default=400)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    print("| seed | believed (before) | header tenant (after) | no header (after) |")
    print("|---|---|---|---|")
    for seed in args.seeds:
        a = arms(args.per_client, seed)
        print(f"| {seed} | {a['believed']:.3f} | {a['header']:.3f} | {a['no header']:.3f} |")


if __name__ == "__main__":
    main()
