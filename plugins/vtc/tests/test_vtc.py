"""vtc: installed, selectable only by config, fair by counters, lifts idle tenants, conforming."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError
from schedkit import (
    EngineState,
    Policy,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    StepReport,
    hookimpl,
    load_config,
)
from schedkit.errors import PolicyConfigError
from schedkit.plugins import implemented_hooks
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_vtc import VirtualTokenCounter, token_cost

NAME = "vtc"
ENGINE = EngineState(kv_blocks_total=1024, block_size=16)


def request(
    request_id: str, tenant: str, prompt: int = 64, *, computed: int = 0, output: int = 0
) -> RequestState:
    state = RequestState(request_id, prompt, max_tokens=64, tenant=tenant)
    state.num_computed_tokens = computed
    state.num_output_tokens = output
    return state


def ids(requests: Sequence[Any] | None) -> list[str]:
    assert requests is not None
    return [r.request_id for r in requests]


def computed(
    policy: VirtualTokenCounter, req: RequestState, n: int, *, preempted: Sequence[Any] = ()
) -> None:
    """Report that ``req`` computed ``n`` more tokens in one step (as an engine would)."""
    req.num_computed_tokens += n
    if req.num_computed_tokens >= req.num_prompt_tokens + req.num_output_tokens:
        req.num_output_tokens += 1  # the step sampled a token
    policy.on_step_finished(StepReport(1, 0.01, 0, 0, [req], [n], tuple(preempted)), ENGINE)


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-vtc"
    assert entry.target == "schedkit_vtc:VirtualTokenCounter"
    assert entry.load() is VirtualTokenCounter


def test_selectable_by_config_not_by_default() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.implemented == {
        "admit_request",
        "order_waiting",
        "on_step_finished",
        "on_request_finished",
    }
    assert NAME not in load_config(None).policy


def test_cli_lists_it_with_its_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    entry = next(e for e in json.loads(result.stdout) if e["name"] == NAME)
    assert entry["distribution"] == "schedkit-vtc"
    assert entry["hooks"] == implemented_hooks(VirtualTokenCounter)
    assert set(entry["options_schema"]["properties"]) == {
        "input_weight",
        "output_weight",
        "weights",
        "idle_s",
        "max_tenants",
    }


# --- ordering -----------------------------------------------------------------------


def test_equal_counters_interleave_tenants_fcfs_within_each() -> None:
    waiting = [request("f1", "flood"), request("f2", "flood"), request("f3", "flood")]
    waiting.append(request("q1", "quiet"))
    order = VirtualTokenCounter().order_waiting(waiting, ENGINE)
    assert ids(order) == ["f1", "q1", "f2", "f3"]
    assert ids(waiting) == ["f1", "f2", "f3", "q1"]  # untouched


def test_provisional_counters_share_one_step_by_prompt_cost() -> None:
    waiting = [request("a1", "a", 1000), request("a2", "a", 1000)]
    waiting += [request(f"b{i}", "b", 100) for i in range(1, 13)]
    order = VirtualTokenCounter().order_waiting(waiting, ENGINE)
    # a1 costs as much as ten of b's requests; at a tie the earlier queue position wins
    expected = ["a1", *(f"b{i}" for i in range(1, 11)), "a2", "b11", "b12"]
    assert ids(order) == expected


def test_the_least_served_tenant_goes_first() -> None:
    policy = VirtualTokenCounter()
    busy = request("busy-0", "busy", 5000)
    computed(policy, busy, 5000)
    waiting = [request("busy-1", "busy"), request("idle-1", "idle"), request("idle-2", "idle")]
    assert policy.counters == {"busy": 5000.0}
    assert ids(policy.order_waiting(waiting, ENGINE)) == ["idle-1", "idle-2", "busy-1"]


# --- counters -----------------------------------------------------------------------


def test_prompt_positions_are_input_later_ones_output() -> None:
    req = request("r", "t", prompt=100)
    assert token_cost(req, 0, 100, 1.0, 2.0) == 100
    assert token_cost(req, 90, 110, 1.0, 2.0) == 10 + 20
    assert token_cost(req, 100, 101, 1.0, 2.0) == 2
    assert token_cost(req, 50, 50, 1.0, 2.0) == 0


def test_counters_follow_computed_tokens_chunks_decodes_and_recompute() -> None:
    policy = VirtualTokenCounter(input_weight=1.0, output_weight=2.0)
    req = request("r", "t", prompt=100)
    computed(policy, req, 60)  # a prefill chunk
    computed(policy, req, 40)  # the rest of the prompt: first token sampled
    assert policy.counters["t"] == 100
    for _ in range(4):
        computed(policy, req, 1)  # decodes
    assert policy.counters["t"] == 100 + 4 * 2
    req.num_computed_tokens = 0  # preempted, then recomputed: prompt plus 4 outputs
    computed(policy, req, 104)
    assert policy.counters["t"] == 108 + 100 + 4 * 2


def test_tenant_weight_divides_the_charge() -> None:
    policy = VirtualTokenCounter(weights={"gold": 2.0})
    gold, plain = request("g", "gold", 100), request("p", "plain", 100)
    computed(policy, gold, 100)
    computed(policy, plain, 100)
    assert policy.counters == {"gold": 50.0, "plain": 100.0}
    # with equal counters gold's requests cost half as much, so it gets two turns per one
    policy = VirtualTokenCounter(weights={"gold": 2.0})
    waiting = [request(f"p{i}", "plain", 100) for i in range(3)]
    waiting += [request(f"g{i}", "gold", 100) for i in range(5)]
    assert ids(policy.order_waiting(waiting, ENGINE)) == [
        *("p0", "g0", "g1", "p1", "g2", "g3", "p2", "g4"),
    ]


# --- the counter lift -----------------------------------------------------------------


def test_a_tenant_returning_from_idle_is_lifted_to_the_backlogged_minimum() -> None:
    policy = VirtualTokenCounter(output_weight=0.0)
    for tenant, cost in (("a", 1000), ("b", 3000)):
        computed(policy, request(f"{tenant}-done", tenant, cost), cost)
        assert policy.admit_request(request(f"{tenant}-1", tenant)) is None  # backlogged
    policy.admit_request(request("idle-1", "idle"))
    assert policy.counters["idle"] == 1000  # not 0: idle time is not banked
    policy.admit_request(request("rich-1", "rich"))
    computed(policy, request("rich-0", "rich", 9000), 9000)
    assert policy.counters["rich"] == 1000 + 9000  # a lift never lowers a counter


def test_no_lift_while_the_tenant_is_still_backlogged() -> None:
    policy = VirtualTokenCounter()
    policy.admit_request(request("f1", "flood"))
    policy.admit_request(request("q1", "quiet"))
    computed(policy, request("f0", "flood", 800), 800)
    policy.admit_request(request("q2", "quiet"))  # q1 still waits
    assert policy.counters.get("quiet", 0.0) == 0.0


def test_with_nothing_backlogged_the_floor_is_the_tenant_that_left_last() -> None:
    policy = VirtualTokenCounter()
    first = request("f1", "flood", 500)
    policy.admit_request(first)
    computed(policy, first, 500)  # scheduled: flood no longer waits
    policy.admit_request(request("q1", "quiet"))
    assert policy.counters["quiet"] == 500


def test_requeued_after_preemption_is_not_a_return_from_idle() -> None:
    policy = VirtualTokenCounter()
    mine = request("m1", "me", 64)
    policy.admit_request(mine)
    computed(policy, mine, 64)
    other = request("o1", "other", 4000)
    policy.admit_request(other)
    computed(policy, other, 4000)
    policy.admit_request(request("o2", "other"))
    mine.num_computed_tokens = 0
    computed(policy, request("o1b", "other", 4000), 16, preempted=[mine])
    assert policy.counters["me"] == 64  # back in the queue, but not lifted


def test_an_aborted_waiting_request_ends_the_backlog() -> None:
    policy = VirtualTokenCounter()
    q1 = request("q1", "quiet")
    policy.admit_request(q1)
    policy.admit_request(request("f1", "flood"))
    computed(policy, request("f0", "flood", 700), 700)
    policy.on_request_finished(q1, ENGINE)
    policy.admit_request(request("q2", "quiet"))
    assert policy.counters["quiet"] == 700


def test_arrivals_another_policy_admitted_are_lifted_when_seen_waiting() -> None:
    policy = VirtualTokenCounter()
    policy.admit_request(request("f1", "flood"))
    computed(policy, request("f0", "flood", 900), 900)
    f1, unseen = request("f1", "flood"), request("u1", "unseen")
    assert ids(policy.order_waiting([f1, unseen], ENGINE)) == ["f1", "u1"]
    assert policy.counters["unseen"] == 900


def test_through_the_facade_with_options_and_composed() -> None:
    config = {"policy": "vtc+lcf", "options": {NAME: {"weights": {"quiet": 4.0}}}}
    facade = PolicyFacade.from_config(config, strict=True)
    assert facade.has_admit and facade.has_order and facade.has_victims
    waiting = [request("f1", "flood"), request("f2", "flood"), request("q1", "quiet")]
    for r in waiting:
        assert facade.admit(r, ENGINE).admitted
    assert ids(facade.order_waiting(waiting, ENGINE)) == ["f1", "q1", "f2"]


# --- on the simulated engine ---------------------------------------------------------

TEN_MS = LinearCostModel(c0=0.01, c_prefill=0.0, c_decode=0.0, c_kv=0.0)


def flood_run(policy: str) -> tuple[RunResult, PolicyFacade]:
    """One running slot; a flood of 40 requests at t=0, then 4 quiet ones."""
    flood = [TraceRequest(f"f{i}", 0.0, 64, 4, tenant="flood") for i in range(40)]
    quiet = [TraceRequest(f"q{i}", 0.001 + 0.1 * i, 32, 4, tenant="quiet") for i in range(4)]
    facade = PolicyFacade.from_config(policy, strict=True)
    config = SimConfig(num_blocks=64, max_num_seqs=1)
    return SimEngine([*flood, *quiet], TEN_MS, config, facade, check_invariants=True).run(), facade


def mean_queue_s(run: RunResult, tenant: str) -> float:
    waits = []
    for record in run.records:
        if record.tenant == tenant:
            assert record.scheduled_s is not None
            waits.append(record.scheduled_s - record.arrival_s)
    return sum(waits) / len(waits)


def test_the_quiet_tenant_is_not_queued_behind_the_flood() -> None:
    fcfs, _ = flood_run("fcfs")
    vtc, facade = flood_run(NAME)
    assert mean_queue_s(fcfs, "quiet") > 1.0  # behind all 40 flood requests (40 ms each)
    assert mean_queue_s(vtc, "quiet") < 0.05  # next in line when it arrives
    for run in (fcfs, vtc):
        assert all(r.finish_reason == "length" for r in run.records)
        assert run.policy_errors == 0
    policy = facade.policies[0][1]
    assert isinstance(policy, VirtualTokenCounter)
    # every prompt token, and every output token but the last (never fed back), counted
    assert policy.counters["flood"] == 40 * (64 + 3 * 2.0)
    # quiet came back from idle four times and was lifted to flood's counter each time
    assert 4 * (32 + 3 * 2.0) < policy.counters["quiet"] <= policy.counters["flood"]


class WidestGap(Policy):
    """Observer: the largest counter difference seen while both tenants were backlogged."""

    def __init__(self, vtc: VirtualTokenCounter) -> None:
        super().__init__()
        self.vtc = vtc
        self.widest = 0.0

    @hookimpl
    def on_step_finished(self) -> None:
        ledger = self.vtc.ledger
        if len(ledger.backlogged()) == 2:
            gap = abs(ledger.counter("long") - ledger.counter("short"))
            self.widest = max(self.widest, gap)


class EngineOrder(Policy):
    """Keeps the engine's (FCFS) order, so a VTC consulted after it only counts."""

    @hookimpl
    def order_waiting(self, waiting: Sequence[Any]) -> list[Any]:
        return list(waiting)


def widest_gap(first: Policy | None) -> float:
    """Both tenants backlogged all along: 40 long prompts, then 80 short ones, at t=0."""
    long = [TraceRequest(f"l{i}", 0.0, 512, 32, tenant="long") for i in range(40)]
    short = [TraceRequest(f"s{i}", 0.0, 64, 32, tenant="short") for i in range(80)]
    vtc = VirtualTokenCounter()
    probe = WidestGap(vtc)
    chain = [("first", first)] if first else []
    facade = PolicyFacade([*chain, (NAME, vtc), ("gap", probe)], strict=True)
    config = SimConfig(num_blocks=160, max_num_seqs=4)  # M = 2,560 tokens of KV
    run = SimEngine([*long, *short], TEN_MS, config, facade, check_invariants=True).run()
    assert all(r.finish_reason == "length" for r in run.records)
    return probe.widest


def test_backlogged_tenants_stay_within_the_papers_2u_bound() -> None:
    # U = max(input_weight * longest prompt, output_weight * KV tokens) = max(512, 5120)
    bound = 2 * 5120
    assert widest_gap(None) < bound / 4
    assert widest_gap(EngineOrder()) > bound  # FCFS serves all of "long" first


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"input_weight": -1}, "input_weight"),
        ({"output_weight": 1e9}, "output_weight"),
        ({"weights": {"a": 0}}, "weights.a"),
        ({"weights": {"a": "heavy"}}, "weights.a"),
        ({"weights": ["a"]}, "weights"),
        ({"idle_s": -1}, "idle_s"),
        ({"max_tenants": 0}, "max_tenants"),
        ({"max_tenants": 2.5}, "max_tenants"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        VirtualTokenCounter.Options.model_validate(options)
    with pytest.raises(PolicyConfigError, match=f"{NAME}.*{field}"):
        PolicyFacade.from_config({"policy": NAME, "options": {NAME: options}})


def test_weights_that_charge_nothing_are_rejected() -> None:
    with pytest.raises(ValidationError, match="at least one of them above 0"):
        VirtualTokenCounter(input_weight=0, output_weight=0)


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="tenant_weights\n"):
        VirtualTokenCounter.Options.model_validate({"tenant_weights": {}})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_weighted = conformance_test(
    NAME,
    {"weights": {"tenant-a": 3.0, "default": 0.5}, "input_weight": 0.0, "output_weight": 1.0},
    max_examples=100,
)


test_contract = contract_test("vtc")  # on every engine installed here
