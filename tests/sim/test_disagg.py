"""Disaggregated serving on the simulator (schedkit/sim/disagg.py): one request's way
recomputed by hand, the run the same stepped or stretched, KV that is held and given
back, the link's queues, the router asked once per pool, and the decode side's policies
deciding what the decode side decides."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import pytest

from schedkit import EngineView, Policy, PolicyFacade, ReplicaView, RequestView, hookimpl
from schedkit.config import load_config
from schedkit.decisions import Admission
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.sim.disagg import DisaggCluster, Pool, PrefillEngine, ready
from schedkit.sim.engine import SimEngine
from schedkit.sim.kv.blocks import blocks_for
from schedkit.sim.kvlink import Fabric, KVLinks, parse_kv_link
from schedkit.workload import TraceRequest, load_workload

COST, MODEL, _ = make_cost_model("Llama-3-8B", "H100-SXM", 1, None)
KVB = MODEL.kv_bytes_per_token


def trace(n: int, *, prompt: int = 0, at_once: bool = False) -> list[TraceRequest]:
    requests = load_workload("azure-conv").truncated(n).scaled(6).requests
    return [
        dataclasses.replace(
            r,
            arrival_s=0.0 if at_once else r.arrival_s,
            prompt_tokens=prompt or r.prompt_tokens,
        )
        for r in requests
    ]


def facades(policy: str, n: int) -> list[PolicyFacade]:
    return [PolicyFacade.from_config(load_config(policy)) for _ in range(n)]


def cluster(
    requests: Sequence[TraceRequest],
    *,
    p: int = 1,
    d: int = 1,
    p_blocks: int = 20_000,
    d_blocks: int = 20_000,
    link: Fabric | None = None,
    policy: str = "fcfs",
    decode_policy: str | None = None,
    router: PolicyFacade | None = None,
    stretch: bool = True,
    check: bool = False,
) -> DisaggCluster:
    c = DisaggCluster(
        requests,
        Pool(facades(policy, p), COST, SimConfig(num_blocks=p_blocks)),
        Pool(facades(decode_policy or policy, d), COST, SimConfig(num_blocks=d_blocks)),
        link or parse_kv_link("ib-ndr"),
        KVB,
        router or PolicyFacade.from_config(load_config(policy)),
        stretch=stretch,
    )
    for engine in c.engines:
        engine.check_invariants = check
    return c


def test_one_request_recomputed_by_hand() -> None:
    """Prefill, transfer of the whole prompt's blocks, the decode instance's step that
    recomputes the last prompt token and samples the first output token (TTFT), then
    decode: each time from the cost model and the link, nothing else."""
    request = trace(1)[0]
    prompt, output = 1000, 10
    request = dataclasses.replace(
        request, arrival_s=0.5, prompt_tokens=prompt, output_tokens=output
    )
    link = Fabric(gbs=10.0, latency_ms=1.0, source="test")
    run = cluster([request], link=link).run()
    (record,) = run.records
    h = record.handoff
    assert h is not None
    prefill = COST.step_time(prompt, 0, prompt, prompt * (prompt + 1) // 2)
    sent = blocks_for(prompt, 16) * 16 * KVB
    transfer = sent / 10e9
    first_step = COST.step_time(0, 1, prompt, prompt)
    times = {
        "scheduled": (record.scheduled_s, 0.5),
        "prefill end": (h.prefill_end_s, 0.5 + prefill),
        "decode admits": (h.kv_alloc_s, 0.5 + prefill),  # an idle decode instance, at once
        "transfer starts": (h.transfer_start_s, 0.5 + prefill),
        "transfer lands": (h.transfer_end_s, 0.5 + prefill + transfer + 1e-3),
        "decode starts": (h.decode_start_s, 0.5 + prefill + transfer + 1e-3),
        "first token": (record.first_token_s, 0.5 + prefill + transfer + 1e-3 + first_step),
    }
    for name, (got, want) in times.items():
        assert got == pytest.approx(want, rel=1e-12), name
    assert record.finish_s is not None and record.first_token_s is not None
    rest = sum(COST.step_time(0, 1, prompt + i + 1, prompt + i + 1) for i in range(output - 1))
    assert record.finish_s - record.first_token_s == pytest.approx(rest, rel=1e-9)
    assert record.output_tokens == output and record.finish_reason == "length"
    assert run.routed == [1] and run.decode_routed == [1]


def _same(a: RequestRecord, b: RequestRecord) -> bool:
    def close(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
        if dataclasses.is_dataclass(x) and dataclasses.is_dataclass(y):
            return all(close(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(x))
        return bool(x == y)

    return close(a, b)


@pytest.mark.parametrize(
    ("p_blocks", "d_blocks"),
    [(20_000, 20_000), (3_000, 2_500), (1_500, 600)],
    ids=["roomy", "tight", "decode-bound"],
)
def test_stretched_runs_are_the_stepped_runs(p_blocks: int, d_blocks: int) -> None:
    """Stretches of decode steps and the decode lane change nothing: every request's
    every time is the same as stepping each engine one step at a time, with the KV
    blocks conserved (held prefill blocks included) after every step."""
    requests = trace(600)
    stepped = cluster(requests, p=2, d=2, p_blocks=p_blocks, d_blocks=d_blocks, stretch=False)
    stepped.engines[0].check_invariants = stepped.engines[-1].check_invariants = True
    a = stepped.run()
    b = cluster(requests, p=2, d=2, p_blocks=p_blocks, d_blocks=d_blocks).run()
    assert len(a.records) == len(b.records) == 600
    assert all(_same(x, y) for x, y in zip(a.records, b.records, strict=True))
    assert a.steps == b.steps and a.preemptions == b.preemptions
    assert all(r.finish_reason == "length" for r in a.records)
    if d_blocks == 600:  # the decode side is the bottleneck: its queue is where time goes
        waits = [r.handoff.kv_alloc_s - r.handoff.prefill_end_s for r in a.records if r.handoff]  # type: ignore[operator]
        assert max(waits) > 1.0


def test_every_request_goes_through_in_order_and_every_block_comes_back() -> None:
    c = cluster(trace(500), p=2, d=3, p_blocks=4_000, d_blocks=3_000)
    run = c.run()
    assert sum(run.routed) == sum(run.decode_routed) == len(run.records) == 500
    for r in run.records:
        h = r.handoff
        assert h is not None and r.finish_reason == "length"
        times = [
            r.arrival_s, r.scheduled_s, h.prefill_end_s, h.kv_alloc_s, h.transfer_start_s,
            h.transfer_end_s, h.decode_start_s, r.first_token_s, r.finish_s,
        ]  # fmt: skip
        assert all(t is not None for t in times)
        assert times == sorted(times), r  # type: ignore[type-var]
        assert r.output_tokens == r.max_tokens
    for engine in c.engines:
        assert engine.kv.num_free == engine.kv.num_blocks
        assert not engine.held and not engine.stalled


def test_the_link_queues_on_each_senders_egress_and_receivers_ingress() -> None:
    links = KVLinks(Fabric(gbs=1.0, latency_ms=2.0, source="test"), 4, 2, prefill=2, decode=2)
    assert links.lanes == 2  # min of the pools' TP: each rank sends its own share
    second = 2e9 * 1.0  # bytes one second takes over two 1 GB/s lanes
    assert links.book(0, 0, int(second), now=0.0) == pytest.approx((0.0, 1.002))
    # the same sender: waits for its egress
    assert links.book(0, 1, int(second), now=0.5) == pytest.approx((1.0, 2.002))
    # the same receiver, another sender: waits for the receiver's ingress
    assert links.book(1, 0, int(second), now=0.5) == pytest.approx((1.0, 2.002))
    # neither busy: at once
    links = KVLinks(Fabric(gbs=1.0, latency_ms=0.0, source="test"), 1, 1, prefill=2, decode=2)
    links.book(0, 0, 10**9, now=0.0)
    assert links.book(1, 1, 10**9, now=0.0) == pytest.approx((0.0, 1.0))
    assert links.seconds(10**9) == pytest.approx(1.0)


def test_decode_pressure_holds_the_prefills_blocks_until_sent() -> None:
    """A decode instance with room for few requests admits them as its decodes end; the
    prefills that ended wait with their KV held on the prefill instance, which stalls
    once it is full of them, and nothing is lost."""
    requests = trace(60, prompt=2_000, at_once=True)
    c = cluster(requests, p_blocks=1_000, d_blocks=400, check=True)
    held: list[int] = []
    prefill = c.prefill[0]
    release = prefill.release

    def watched(req: Any, when: float) -> None:
        held.append(len(prefill.held))
        release(req, when)

    prefill.release = watched  # type: ignore[method-assign]
    run = c.run()
    assert all(r.finish_reason == "length" for r in run.records)
    assert max(held) * blocks_for(2_001, 16) > 1_000 * 0.8  # the prefill KV filled with held
    assert prefill.kv.num_free == prefill.kv.num_blocks
    waits = sorted(r.handoff.kv_alloc_s - r.handoff.prefill_end_s for r in run.records)  # type: ignore[union-attr,operator]
    assert waits[0] < 0.1 < 1.0 < waits[-1]  # the first went at once, the last waited


class Recording(Policy):
    """Routes to the last replica, and records what each call saw."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, ...]] = []

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        self.calls.append(tuple(r.role for r in replicas))
        return replicas[-1].index


class OutOfRange(Policy):
    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        return len(replicas)


def test_the_router_is_asked_once_per_pool_with_that_pools_instances() -> None:
    recording = Recording()
    router = PolicyFacade([("recording", recording)])
    run = cluster(trace(40), p=2, d=3, router=router).run()
    assert recording.calls[0] == ("prefill", "prefill")
    assert sorted(set(recording.calls)) == [("decode",) * 3, ("prefill",) * 2]
    assert len(recording.calls) == 80  # each request: its prefill, then its decode
    assert run.routed == [0, 40] and run.decode_routed == [0, 0, 40]
    # an answer out of range is the policy's error, and the pool's round-robin routes
    run = cluster(trace(40), p=2, d=3, router=PolicyFacade([("out-of-range", OutOfRange())])).run()
    assert run.routed == [20, 20] and run.decode_routed == [14, 13, 13]
    assert run.policy_errors == 80


def test_the_decode_sides_waiting_order_is_the_decode_policys() -> None:
    """With room on the decode instance for one request at a time, each admission takes
    the request its policy ranks first among those whose prefill had ended: the
    shortest prompt under shortest-prompt, the first handed off under fcfs."""
    requests = [
        dataclasses.replace(
            r, arrival_s=0.0, prompt_tokens=2_000 + 50 * (i * 7 % 23), output_tokens=40
        )
        for i, r in enumerate(trace(23))
    ]
    d_blocks = blocks_for(2_000 + 50 * 22 + 40, 16) + 10  # the longest, but never two
    orders = {}
    for policy in ("fcfs", "shortest-prompt"):
        run = cluster(requests, d_blocks=d_blocks, policy="fcfs", decode_policy=policy).run()
        records = sorted(run.records, key=lambda r: r.handoff.kv_alloc_s)  # type: ignore[union-attr,arg-type,return-value]
        for i, r in enumerate(records[1:], 1):
            h = r.handoff
            assert h is not None and h.kv_alloc_s is not None
            queued = [
                q
                for q in records[i:]
                if q.handoff.prefill_end_s <= h.kv_alloc_s  # type: ignore[union-attr,operator]
            ]
            if policy == "fcfs":
                assert r is min(queued, key=lambda q: q.handoff.prefill_end_s)  # type: ignore[union-attr,arg-type,return-value]
            else:
                assert r.prompt_tokens == min(q.prompt_tokens for q in queued)
        orders[policy] = [r.request_id for r in records]
    assert orders["fcfs"] != orders["shortest-prompt"]


class RefuseLong(Policy):
    """Admits requests with prompts up to 1,000 tokens."""

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if request.num_prompt_tokens > 1_000:
            return Admission.reject("too long for decode")
        return None


def test_a_request_the_decode_side_refuses_gives_its_prefill_blocks_back() -> None:
    requests = trace(80)
    c = DisaggCluster(
        requests,
        Pool(facades("fcfs", 1), COST, SimConfig(num_blocks=20_000)),
        Pool([PolicyFacade([("refuse-long", RefuseLong())])], COST, SimConfig(num_blocks=20_000)),
        parse_kv_link("ib-ndr"),
        KVB,
        PolicyFacade.from_config(load_config("fcfs")),
    )
    run = c.run()
    refused = [r for r in run.records if r.prompt_tokens > 1_000]
    assert refused and all(r.finish_reason == "rejected" for r in refused)
    assert all(r.reject_reason == "too long for decode" for r in refused)
    assert all(r.finish_reason == "length" for r in run.records if r.prompt_tokens <= 1_000)
    prefill = c.prefill[0]
    assert isinstance(prefill, PrefillEngine) and not prefill.held
    assert prefill.kv.num_free == prefill.kv.num_blocks


def test_kv_link_presets_and_bad_links() -> None:
    assert parse_kv_link("NVLink4").gbs == 450.0
    assert parse_kv_link("25:0.5") == Fabric(25.0, 0.5, "given")
    assert parse_kv_link("12.5GB/s").gbs == 12.5
    with pytest.raises(
        Exception, match=r"kv_link: unknown link 'infiniband'; valid links: nvlink3"
    ):
        parse_kv_link("infiniband")
    with pytest.raises(Exception, match=r"a link needs a bandwidth above 0 GB/s"):
        parse_kv_link("0:1")


class Lockstep(DisaggCluster):
    """The reference: no engine runs past another's next step (the simplest exact order,
    and the slowest: the real run lets each engine run on until something could reach it)."""

    def _bounded(self, engine: SimEngine, until: float) -> float:
        others = (ready(e) for e in self.engines if e is not engine)
        return min(until, min(others, default=math.inf))


@pytest.mark.parametrize(
    ("p", "d", "p_blocks", "d_blocks"),
    [(2, 2, 20_000, 20_000), (3, 2, 3_000, 2_500), (2, 3, 1_500, 600), (1, 1, 20_000, 20_000)],
)
def test_engines_running_ahead_decide_as_in_lockstep(
    p: int, d: int, p_blocks: int, d_blocks: int
) -> None:
    """Each engine runs on until something could reach it (a hand-off, a landing, a
    booking); the run is the lockstep reference's, request for request."""
    requests = trace(700)

    def run(kind: type[DisaggCluster]) -> RunResult:
        c = kind(
            requests,
            Pool(facades("least-loaded", p), COST, SimConfig(num_blocks=p_blocks)),
            Pool(facades("least-loaded", d), COST, SimConfig(num_blocks=d_blocks)),
            parse_kv_link("ib-hdr"),
            KVB,
            PolicyFacade.from_config(load_config("least-loaded")),
        )
        return c.run()

    fast, reference = run(DisaggCluster), run(Lockstep)
    assert all(_same(x, y) for x, y in zip(fast.records, reference.records, strict=True))
    assert fast.steps == reference.steps and fast.decode_routed == reference.decode_routed
