"""vLLM's newer scheduler knobs on the twin and the simulator (issue #39 item 4): with
``prefill_schedule_interval`` (vLLM 0.33+) and ``cache_aware_admission_window`` /
``_threshold`` (0.34) set, vLLM's own scheduler (model-less, the twin) and the
simulator schedule identical batches at every step, on traces where they matter: a
decoding batch with arrivals between its steps (the cadence), and Mooncake's shared
prefixes under KV pressure (the window)."""

from __future__ import annotations

from typing import Any

import pytest
import vllm
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.sim.config import SimConfig
from schedkit.sim.engine import SimEngine

from schedkit_vllm.compat import parse_version
from schedkit_vllm.harness.modelless import scheduler_knobs
from schedkit_vllm.harness.twin import TwinEngine

VERSION = parse_version(vllm.__version__)[:2]
needs = {
    "0.33": pytest.mark.skipif(VERSION < (0, 33), reason=f"vLLM {vllm.__version__} < 0.33"),
    "0.34": pytest.mark.skipif(VERSION < (0, 34), reason=f"vLLM {vllm.__version__} < 0.34"),
}


class _ObservedSim(SimEngine):
    steps: list[frozenset[tuple[str, int]]]

    def _execute(self, scheduled: Any, preempted: Any, lane: int = 0) -> None:
        self.steps.append(frozenset((r.request_id, n) for r, n in scheduled.items()))
        super()._execute(scheduled, preempted, lane)


def _same_batches(spec: BenchSpec) -> int:
    """Run ``spec``'s first arm on the simulator (step by step) and on the twin; assert
    every step's batch is the same; the number of steps compared."""
    bench = Bench(spec)
    requests = bench.workload(bench.spec.workload.rate_scale).requests
    sim = _ObservedSim(
        requests, bench.cost, bench.sim_config, PolicyFacade.from_config(bench.configs[0]),
        stretch=False, lane=False,  # every step's whole batch
    )  # fmt: skip
    sim.steps = []
    sim_run = sim.run()
    twin_steps: list[frozenset[tuple[str, int]]] = []
    twin_run = TwinEngine(
        requests, bench.cost, bench.sim_config, bench.configs[0],
        on_step=lambda i, t, counts, pre: twin_steps.append(frozenset(counts.items())),
    ).run()  # fmt: skip
    sim_batches = [s for s in sim.steps if s]
    assert [s for s in twin_steps if s] == sim_batches
    assert twin_run.preemptions == sim_run.preemptions
    return len(sim_batches)


def _admissions(spec: BenchSpec) -> list[tuple[str, float | None]]:
    """Each request and when the simulator admitted it."""
    bench = Bench(spec)
    run = SimEngine(
        bench.workload(bench.spec.workload.rate_scale).requests, bench.cost,
        bench.sim_config, PolicyFacade.from_config(bench.configs[0]),
    ).run()  # fmt: skip
    return [(r.request_id, r.scheduled_s) for r in run.records]


CADENCE = {"workload": "azure-conv", "policies": ["fcfs"], "max_requests": 150, "rate_scale": 4.0}


@needs["0.33"]
@pytest.mark.parametrize("interval", [3, 8])
def test_prefill_cadence_twin_matches_the_simulator(interval: int) -> None:
    held = BenchSpec(**CADENCE, prefill_schedule_interval=interval)
    assert _admissions(held) != _admissions(BenchSpec(**CADENCE))  # the knob moved something
    assert _same_batches(held) > 100


PREFIXES = {"workload": "mooncake-conv", "policies": ["fcfs"], "max_requests": 60,
            "rate_scale": 8.0, "kv_blocks": 9000}  # fmt: skip


@needs["0.34"]
@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_cache_aware_window_twin_matches_the_simulator(threshold: float) -> None:
    window = BenchSpec(
        **PREFIXES, cache_aware_admission_window=16, cache_aware_admission_threshold=threshold
    )
    if threshold == 0.0:  # the knob moved something
        assert _admissions(window) != _admissions(BenchSpec(**PREFIXES))
    assert _same_batches(window) > 100


@needs["0.34"]
def test_both_knobs_together_twin_matches_the_simulator() -> None:
    both = BenchSpec(**PREFIXES, cache_aware_admission_window=16, prefill_schedule_interval=4)
    assert _same_batches(both) > 100


def test_a_knob_this_vllm_lacks_is_refused_by_name() -> None:
    config = SimConfig(num_blocks=100, cache_aware_admission_window=8)
    if VERSION >= (0, 34):
        assert scheduler_knobs(config) == {"cache_aware_admission_window": 8}
    else:
        with pytest.raises(SchedkitError, match=r"cache_aware_admission_window needs vLLM 0\.34"):
            scheduler_knobs(config)
    assert scheduler_knobs(SimConfig(num_blocks=100)) == {}
