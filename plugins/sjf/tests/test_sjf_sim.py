"""sjf in the simulated engine: short jobs first, long ones not starved, predictor learns."""

from __future__ import annotations

from typing import Any

from schedkit import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.engine import SimEngine
from schedkit.workload import TraceRequest

from schedkit_sjf import LearnedPredictor

# 5 ms per step plus 10 us per prefill token: work is mostly prompt tokens.
COST = LinearCostModel(c0=0.005, c_prefill=1e-5, c_decode=0.0, c_kv=0.0)


def replay(
    requests: list[TraceRequest], config: Any, *, max_num_seqs: int = 1, budget: int = 8192
) -> tuple[RunResult, PolicyFacade]:
    facade = PolicyFacade.from_config(config, strict=True)
    sim = SimConfig(num_blocks=4096, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    engine = SimEngine(requests, COST, sim, facade, check_invariants=True)
    return engine.run(), facade


def ttft(run: RunResult) -> dict[str, float]:
    out = {}
    for r in run.records:
        assert r.first_token_s is not None, r.request_id
        out[r.request_id] = r.first_token_s - r.arrival_s
    return out


def sjf(**options: Any) -> dict[str, Any]:
    return {"policy": "sjf", "options": {"sjf": options}}


def test_a_waiting_long_job_goes_after_shorter_ones_and_mean_ttft_drops() -> None:
    # A short one occupies the engine; a long and ten shorts then queue behind it.
    requests = [TraceRequest("first", 0.0, 50, 2), TraceRequest("long", 0.0001, 8000, 1)] + [
        TraceRequest(f"short-{i}", 0.0002, 50, 1) for i in range(10)
    ]
    run, _ = replay(requests, sjf(predictor="oracle", aging_rate=0))
    times = ttft(run)
    assert all(times["long"] > times[f"short-{i}"] for i in range(10))
    fcfs_run, _ = replay(requests, "fcfs")
    fcfs_times = ttft(fcfs_run)
    assert all(fcfs_times["long"] < fcfs_times[f"short-{i}"] for i in range(10))
    assert sum(times.values()) < sum(fcfs_times.values()) / 2  # mean TTFT more than halved


def flood() -> list[TraceRequest]:
    """A long job, then short ones arriving faster than the engine serves them (3 s)."""
    shorts = [TraceRequest(f"short-{i:04d}", 0.002 * (i + 1), 10, 1) for i in range(1500)]
    return [TraceRequest("long", 0.0005, 1000, 1), *shorts]


def test_aging_bounds_the_wait_of_a_long_job_under_a_flood() -> None:
    first = TraceRequest("first", 0.0, 10, 1)  # keeps the engine busy when "long" arrives
    no_aging = ttft(replay([first, *flood()], sjf(predictor="oracle", aging_rate=0))[0])
    aging = ttft(replay([first, *flood()], sjf(predictor="oracle", aging_rate=1000))[0])
    # Without aging the long job waits for the whole flood to drain (1500 x ~5 ms) ...
    assert no_aging["long"] > 7.0
    assert no_aging["long"] > max(v for k, v in no_aging.items() if k != "long") - 0.1
    # ... with 1000 tokens of credit per second it overtakes once it has waited about
    # 1 s longer than the oldest waiting short job: after ~2.5 s here.
    assert aging["long"] < 3.5


def test_learned_predictor_learns_which_tenant_writes_long_outputs() -> None:
    # Warm-up: both tenants finish requests (same prompts, outputs 2 vs 200 tokens).
    warmup = [
        TraceRequest(f"w-{t}-{i}", 0.5 * i, 100, 2 if t == "chat" else 200, tenant=t)
        for i in range(8)
        for t in ("chat", "essay")
    ]
    # Then a burst where essays arrive first; one request runs at a time.
    burst = [TraceRequest(f"essay-{i}", 20.0, 100, 200, tenant="essay") for i in range(5)] + [
        TraceRequest(f"chat-{i}", 20.0001, 100, 2, tenant="chat") for i in range(5)
    ]
    config = sjf(predictor="learned", min_samples=4, prior_output_tokens=50, aging_rate=0)
    run, facade = replay(warmup + burst, config)
    predictor = facade.policies[0][1].predictor  # type: ignore[attr-defined]
    assert isinstance(predictor, LearnedPredictor)
    times = ttft(run)
    chats = [times[f"chat-{i}"] for i in range(5)]
    essays = [times[f"essay-{i}"] for i in range(1, 5)]  # essay-0 started before chats came
    assert max(chats) < min(essays)
    fcfs_times = ttft(replay(warmup + burst, "fcfs")[0])
    assert sum(chats) < sum(fcfs_times[f"chat-{i}"] for i in range(5)) / 3
