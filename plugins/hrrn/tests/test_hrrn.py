"""hrrn: the ratio, the order, its aging in prefill tokens and in seconds, and the engine
contract; then in the simulated engine: short prefills first, a long one not starved."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from schedkit import (
    EngineState,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    RequestView,
    StepReport,
)
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.testing import conformance_test, contract_test
from schedkit.workload import TraceRequest

from schedkit_hrrn import HighestResponseRatioNext, uncached_tokens

NAME = "hrrn"
COST = LinearCostModel(c0=0.005, c_prefill=1e-5, c_decode=0.0, c_kv=0.0)  # prefill-bound


def request(
    request_id: str, prompt: int, *, arrival: float = 0.0, computed: int = 0
) -> RequestState:
    state = RequestState(request_id, prompt, 16, arrival_time=arrival)
    state.num_computed_tokens = computed
    return state


def ids(requests: Sequence[RequestView]) -> list[str]:
    return [r.request_id for r in requests]


def step(prefill: int) -> StepReport:
    return StepReport(num_steps=1, duration_s=0.01, num_prefill_tokens=prefill,
                      num_decode_tokens=0, scheduled=())  # fmt: skip


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-hrrn"
    assert entry.load() is HighestResponseRatioNext


def test_uncached_tokens_leave_out_what_is_computed_or_cached() -> None:
    r = request("r", 1000, computed=300)
    assert uncached_tokens(r) == 700
    r.num_cached_tokens = 512
    assert uncached_tokens(r) == 488


def test_the_ratio_grows_with_the_prefill_work_done_since_arrival() -> None:
    """SGLang's rule: waited = prefill tokens processed since arrival; a 100-token
    request that saw 1,000 tokens pass outranks a 4,000-token one that saw 2,000."""
    policy = HighestResponseRatioNext()
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    long = request("long", 4000)
    policy.on_request_arrived(long)
    policy.on_step_finished(step(1000))
    short = request("short", 100)
    policy.on_request_arrived(short)
    policy.on_step_finished(step(1000))
    assert policy.ratio(long, 0.0) == pytest.approx(2000 / 4000)
    assert policy.ratio(short, 0.0) == pytest.approx(1000 / 100)
    assert ids(policy.order_waiting([long, short], engine)) == ["short", "long"]
    policy.on_step_finished(step(100_000))  # much later, the long one leads
    fresh = request("fresh", 100)
    policy.on_request_arrived(fresh)
    assert ids(policy.order_waiting([fresh, short, long], engine)) == ["short", "long", "fresh"]
    policy.on_request_finished(short)
    assert "short" not in policy.arrived_at  # nothing kept for a request that left


def test_equal_waits_keep_arrival_order() -> None:
    """Requests that saw no prefill work since they arrived tie (ratio 0), as in SGLang:
    the engine's order (arrival) stands, whatever their lengths."""
    policy = HighestResponseRatioNext()
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    long, short = request("long", 8000, arrival=1.0), request("short", 50, arrival=2.0)
    for r in (long, short):
        policy.on_request_arrived(r)
    assert ids(policy.order_waiting([short, long], engine)) == ["long", "short"]


def test_nothing_to_prefill_goes_first_and_ties_keep_arrival_order() -> None:
    policy = HighestResponseRatioNext()
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    a, b = request("a", 100, arrival=1.0), request("b", 100, arrival=2.0)
    done = request("done", 100, arrival=3.0, computed=100)
    for r in (a, b, done):
        policy.on_request_arrived(r)
    assert ids(policy.order_waiting([b, done, a], engine)) == ["done", "a", "b"]


def test_aging_in_seconds_is_classic_hrrn() -> None:
    options = HighestResponseRatioNext.Options(aging="seconds", prefill_tokens_per_s=1000)
    policy = HighestResponseRatioNext(options)
    assert policy.ratio(request("r", 500, arrival=1.0), 3.0) == pytest.approx(2.0 * 1000 / 500)


test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_seconds = conformance_test(NAME, {"aging": "seconds"}, max_examples=50)
test_contract = contract_test(NAME)  # on every engine installed here


# -- in the simulated engine ---------------------------------------------------------


def replay(requests: list[TraceRequest], config: Any, budget: int = 8192) -> RunResult:
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=8192, max_num_seqs=1, max_num_batched_tokens=budget)
    return SimEngine(requests, COST, sim, facade, check_invariants=True).run()


def ttft(run: RunResult) -> dict[str, float]:
    out = {}
    for r in run.records:
        assert r.first_token_s is not None, r.request_id
        out[r.request_id] = r.first_token_s - r.arrival_s
    return out


def test_short_prefills_go_first_and_mean_ttft_drops() -> None:
    """Once prefill work has passed them (the second 1,000-token chunk of ``first``), the
    short requests' ratios (1,000 / 50) beat the long one's (1,000 / 8,000)."""
    first = TraceRequest("first", 0.0, 2000, 1)  # two chunks: the others arrive between
    long = TraceRequest("long", 0.0001, 8000, 1)
    shorts = [TraceRequest(f"short-{i}", 0.0002, 50, 1) for i in range(10)]
    times = ttft(replay([first, long, *shorts], NAME, budget=1000))
    fcfs = ttft(replay([first, long, *shorts], "fcfs", budget=1000))
    assert all(times["long"] > times[f"short-{i}"] for i in range(10))
    assert all(fcfs["long"] < fcfs[f"short-{i}"] for i in range(10))
    assert sum(times.values()) < sum(fcfs.values()) / 2


def test_a_long_prefill_is_not_starved_by_a_flood_of_short_ones() -> None:
    """Shorts arrive faster than the engine serves them: shortest-prompt-first leaves the
    long one waiting for the whole flood; hrrn serves it once the prefill work that passed
    it reaches its own size times the shorts' ratio."""
    first = TraceRequest("first", 0.0, 10, 1)
    flood = [TraceRequest(f"short-{i:04d}", 0.002 * (i + 1), 10, 1) for i in range(1500)]
    requests = [first, TraceRequest("long", 0.0005, 1000, 1), *flood]
    shortest = ttft(replay(requests, "shortest-prompt"))
    times = ttft(replay(requests, NAME))
    assert shortest["long"] > 7.0  # after the flood drained (1,500 x ~5 ms)
    assert times["long"] < 1.0
