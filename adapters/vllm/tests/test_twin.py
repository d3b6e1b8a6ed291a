"""Twin mode: the real vLLM scheduler replays a workload with the cost model as clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from schedkit import Admission, Policy, RequestView, hookimpl, load_config
from schedkit.bench.runner import Bench, BenchSpec, run_bench, run_on_sim
from schedkit.facade import PolicyFacade
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import make_cost_model
from schedkit.sim.engine import SimEngine
from schedkit.workload import TraceRequest

from schedkit_vllm.harness.twin import TwinEngine, run_twin_arm


def _cost() -> Any:
    return make_cost_model("Llama-3-8B", "H100-SXM", 1, None)[0]


def _burst(n: int) -> list[TraceRequest]:
    """``n`` requests at t=0; priorities run against arrival order."""
    return [
        TraceRequest(f"r{i}", 0.0, 40 + 8 * i, 4, tenant=f"t{i % 2}", priority=n - i)
        for i in range(n)
    ]


def test_twin_arm_completes_every_request() -> None:
    bench = Bench(BenchSpec(workload="azure-conv", policies=["fcfs"], max_requests=60))
    run = run_twin_arm(bench, 0, 1.0)
    assert len(run.records) == 60
    for rec in run.records:
        assert rec.finish_reason == "length", rec
        assert rec.output_tokens == rec.max_tokens
        assert rec.scheduled_s is not None and rec.first_token_s is not None
        assert rec.arrival_s <= rec.scheduled_s < rec.first_token_s <= rec.finish_s  # type: ignore[operator]
    assert run.steps > 0 and run.duration_s > 0 and run.timeline


def test_priority_policy_changes_admission_order() -> None:
    config = SimConfig(num_blocks=200, max_num_seqs=1, max_num_batched_tokens=512)
    order = {}
    for policy in ("fcfs", "priority"):
        run = TwinEngine(_burst(6), _cost(), config, load_config(policy)).run()
        admitted = sorted(run.records, key=lambda r: r.scheduled_s or 0.0)
        order[policy] = [r.request_id for r in admitted]
    assert order["fcfs"] == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert order["priority"] == ["r5", "r4", "r3", "r2", "r1", "r0"]


class Raising(Policy):
    """Raises on every other call of each hook it implements, rejects one request."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.calls = 0

    def _boom(self) -> None:
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("raising policy")

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if request.request_id == "r3":
            return Admission.reject("no r3")
        self._boom()
        return None

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView]:
        self._boom()
        return list(reversed(waiting))

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView
    ) -> list[RequestView]:
        self._boom()
        return list(running)[:1]


def test_raising_policy_loses_nothing(register_policy: Callable[[str, type], None]) -> None:
    register_policy("raising", Raising)
    # 24 blocks of 16 tokens for 8 requests of ~100 tokens: preemptions happen.
    config = SimConfig(num_blocks=24, max_num_seqs=8, max_num_batched_tokens=256)
    requests = [TraceRequest(f"r{i}", 0.01 * i, 60 + 10 * i, 40) for i in range(8)]
    run = TwinEngine(requests, _cost(), config, load_config("raising")).run()
    finished = {r.request_id: r.finish_reason for r in run.records}
    assert finished.pop("r3") == "rejected"
    assert set(finished.values()) == {"length"}
    assert run.rejections == {"no r3": 1}
    assert run.policy_errors > 0
    assert run.preemptions > 0
    assert all(r.output_tokens == r.max_tokens for r in run.records if r.request_id != "r3")


class _ObservedSim(SimEngine):
    steps: list[frozenset[tuple[str, int]]]

    def _execute(self, scheduled: Any, preempted: Any, lane: int = 0) -> None:
        self.steps.append(frozenset((r.request_id, n) for r, n in scheduled.items()))
        super()._execute(scheduled, preempted, lane)


@pytest.mark.parametrize("kv_blocks", [None, 300])
def test_twin_matches_simulator_step_by_step(kv_blocks: int | None) -> None:
    """On azure-conv (no shared prefixes, prompts within one step's budget) the simulator
    and vLLM schedule identical batches at every step, preemptions included
    (benchmarks/fidelity/vllm-twin.md: 41,151 and 36,975 steps, 100% identical)."""
    spec = BenchSpec(
        workload="azure-conv", policies=["fcfs"], max_requests=150, kv_blocks=kv_blocks
    )
    bench = Bench(spec)
    reqs = bench.workload(1.0).requests
    sim = _ObservedSim(
        reqs,
        bench.cost,
        bench.sim_config,
        PolicyFacade.from_config(bench.configs[0]),
        stretch=False,
        lane=False,  # every step's whole batch
    )
    sim.steps = []
    sim_run = sim.run()
    twin_steps: list[frozenset[tuple[str, int]]] = []
    twin_run = TwinEngine(
        reqs,
        bench.cost,
        bench.sim_config,
        bench.configs[0],
        on_step=lambda i, t, counts, pre: twin_steps.append(frozenset(counts.items())),
    ).run()
    assert [s for s in twin_steps if s] == [s for s in sim.steps if s]
    assert twin_run.preemptions == sim_run.preemptions
    assert (kv_blocks is None) == (sim_run.preemptions == 0)
    sm, tm = bench.metrics(sim_run), bench.metrics(twin_run)
    stretched = bench.metrics(run_on_sim(bench, 0, 1.0))  # the bench's own simulator path
    for key in ("ttft_ms", "tpot_ms"):
        for q in ("p50", "p90"):
            assert tm[key][q] == pytest.approx(sm[key][q], rel=1e-9)
            assert tm[key][q] == pytest.approx(stretched[key][q], rel=1e-6)


def test_bench_cli_path_writes_results(tmp_path: Path) -> None:
    spec = BenchSpec(
        workload="azure-conv", policies=["fcfs", "priority"], engine="vllm-twin", max_requests=30
    )
    results = run_bench(spec, tmp_path)
    assert [a["metrics"]["completed"] for a in results["arms"]] == [30, 30]
    assert (tmp_path / "results.json").exists() and (tmp_path / "report.md").exists()


class ClockProbe(Policy):
    """Records what a policy sees of time: the engine clock minus each arrival."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.waits: list[float] = []

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: Any) -> None:
        self.waits.extend(engine.clock - r.arrival_time for r in waiting)


def test_twin_policies_see_the_simulated_clock_as_on_the_simulator() -> None:
    # Policies judge waits by engine.clock - request.arrival_time. The twin stamps
    # arrivals with the trace's (simulated) times, so its engine clock must be the
    # simulated one too: with vLLM's wall clock every wait came out about -1.8e9 s and
    # the slo policy rejected every request the simulator admitted.
    requests = [TraceRequest(f"r{i}", 0.05 * i, 200, 16, slo_ttft_ms=2000.0) for i in range(20)]
    config = SimConfig(num_blocks=400, max_num_seqs=2)
    waits = {}
    for name in ("sim", "twin"):
        probe = ClockProbe()
        facade = PolicyFacade([("probe", probe)])
        if name == "sim":
            SimEngine(requests, _cost(), config, facade, stretch=False).run()
        else:
            TwinEngine(requests, _cost(), config, load_config("fcfs"), facade=facade).run()
        waits[name] = probe.waits
    assert waits["twin"] and min(waits["twin"]) >= 0 and max(waits["twin"]) < 60
    assert waits["twin"] == pytest.approx(waits["sim"], abs=1e-9)
    for name in ("sim", "twin"):
        runs = [
            (run_on_sim if name == "sim" else run_twin_arm)(
                Bench(
                    BenchSpec(
                        workload="poisson:rate=20,n=20,prompt=256,output=16",
                        policies=["slo"],
                        slo_ttft_ms=2000,
                    )
                ),
                0,
                1.0,
            )
        ]
        waits[name + "-rejected"] = [sum(r.rejections.values()) for r in runs]
    assert waits["sim-rejected"] == waits["twin-rejected"] == [0]
