"""Fidelity of the simulator against the real vLLM scheduler (twin mode), step by step.

Both engines replay the same trace with the same cost model and engine config:

- ``sim``: ``SimEngine`` with ``stretch=False`` (one step at a time, so steps line up),
  observed by overriding ``_execute``, which receives each step's ``{request: tokens}``
  and the preempted requests before the clock advances.
- ``vllm-twin``: ``schedkit_vllm.harness.twin.TwinEngine`` with an ``on_step`` callback, which
  sees ``SchedulerOutput.num_scheduled_tokens`` and ``preempted_req_ids``.

Step ``i`` matches when both scheduled the same set of (request id, tokens) pairs and
preempted the same requests. Steps that schedule and preempt nothing are not counted.
The first diverging step is printed with both batches. TTFT/TPOT p50/p90 come from
``compute_metrics`` on each RunResult (the same figures ``schedkit bench`` reports).

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/fidelity/vllm_twin.py  # all settings x policies
    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/fidelity/vllm_twin.py --only kv --policy lcf
    # attribute a divergence: vLLM without its whole-prompt admission check
    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/fidelity/vllm_twin.py --no-reserve-full-isl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from schedkit_vllm.harness.twin import TwinEngine

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.facade import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.engine import SimEngine, no_cyclic_gc
from schedkit.testing.contract import shipped_policies

Batch = tuple[frozenset[tuple[str, int]], frozenset[str]]

SETTINGS: dict[str, dict[str, Any]] = {
    "azure": {"workload": "azure-conv", "max_requests": 1500},
    "kv": {"workload": "azure-conv", "max_requests": 1000, "kv_blocks": 600},
    "mooncake": {"workload": "mooncake-conv", "max_requests": 300},
    "mooncake-nocache": {
        "workload": "mooncake-conv",
        "max_requests": 300,
        "prefix_caching": False,
    },
    "two-tenant": {"workload": "two-tenant-flood", "max_requests": 600, "kv_blocks": 2000},
}


@dataclass
class Trace:
    steps: list[Batch] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)


class ObservedSim(SimEngine):
    trace: Trace

    def _execute(self, scheduled: Any, preempted: Any, lane: int = 0) -> None:
        if scheduled or preempted:
            self.trace.steps.append(
                (
                    frozenset((r.request_id, n) for r, n in scheduled.items()),
                    frozenset(r.request_id for r in preempted),
                )
            )
            self.trace.clocks.append(self.view.clock)
        super()._execute(scheduled, preempted, lane)


def run_sim(bench: Bench, policy: int) -> tuple[RunResult, Trace]:
    facade = PolicyFacade.from_config(bench.configs[policy])
    engine = ObservedSim(  # every step's whole batch: no decode lane
        bench.workload(1.0).requests,
        bench.cost,
        bench.sim_config,
        facade,
        stretch=False,
        lane=False,
    )
    engine.trace = Trace()
    with no_cyclic_gc():
        return engine.run(), engine.trace


def run_twin(bench: Bench, policy: int, reserve_full_isl: bool = True) -> tuple[RunResult, Trace]:
    trace = Trace()

    def on_step(step: int, clock: float, counts: dict[str, int], preempted: Any) -> None:
        if counts or preempted:
            trace.steps.append((frozenset(counts.items()), frozenset(preempted)))
            trace.clocks.append(clock)

    engine = TwinEngine(
        bench.workload(1.0).requests,
        bench.cost,
        bench.sim_config,
        bench.configs[policy],
        on_step=on_step,
    )
    # vLLM's default (True): a new request is admitted only if its whole prompt fits.
    engine.scheduler.scheduler_reserve_full_isl = reserve_full_isl
    return engine.run(), trace


def compare(
    name: str, spec: BenchSpec, policy: int = 0, reserve_full_isl: bool = True
) -> dict[str, Any]:
    bench = Bench(spec)
    t0 = time.perf_counter()
    sim_run, sim = run_sim(bench, policy)
    t1 = time.perf_counter()
    twin_run, twin = run_twin(bench, policy, reserve_full_isl)
    t2 = time.perf_counter()
    n = min(len(sim.steps), len(twin.steps))
    same = sum(1 for a, b in zip(sim.steps, twin.steps, strict=False) if a == b)
    first = next((i for i in range(n) if sim.steps[i] != twin.steps[i]), None)
    sm, tm = bench.metrics(sim_run), bench.metrics(twin_run)
    out: dict[str, Any] = {
        "setting": name,
        "vllm_reserve_full_isl": reserve_full_isl,
        "spec": spec.model_dump(exclude_defaults=True),
        "kv_blocks": bench.sim_config.num_blocks,
        "steps_sim": len(sim.steps),
        "steps_twin": len(twin.steps),
        "same_batch_steps": same,
        "same_batch_fraction": same / max(len(sim.steps), len(twin.steps)),
        "first_divergence": first,
        "sim_wall_s": round(t1 - t0, 2),
        "twin_wall_s": round(t2 - t1, 2),
        "metrics": {},
    }
    for key in ("ttft_ms", "tpot_ms"):
        for q in ("p50", "p90"):
            a, b = sm[key][q], tm[key][q]
            out["metrics"][f"{key}_{q}"] = {
                "sim": a,
                "twin": b,
                "rel_dev": (b - a) / a if a else None,
            }
    for key in ("completed", "preemptions", "recomputed_tokens", "prefix_hit_rate", "duration_s"):
        out["metrics"][key] = {"sim": sm[key], "twin": tm[key]}
    if first is not None:
        a, b = sim.steps[first], twin.steps[first]
        out["divergence"] = {
            "clock_sim": sim.clocks[first],
            "clock_twin": twin.clocks[first],
            "only_sim": sorted(a[0] - b[0]),
            "only_twin": sorted(b[0] - a[0]),
            "preempted_sim": sorted(a[1]),
            "preempted_twin": sorted(b[1]),
            "batch_size": (len(a[0]), len(b[0])),
        }
    return out


def summary_line(r: dict[str, Any]) -> str:
    """One table row: setting, policy, same-batch rate, TTFT/TPOT p50/p90 deviation."""
    m = r["metrics"]
    devs = " ".join(
        f"{(m[k]['rel_dev'] or 0.0) * 100:+.1f}%"
        for k in ("ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50", "tpot_ms_p90")
    )
    return (
        f"| {r['setting']} | {r['policy']} | {r['steps_sim']:,} / {r['steps_twin']:,} |"
        f" {r['same_batch_fraction'] * 100:.1f}% | {r['first_divergence']} | {devs} |"
        f" {m['preemptions']['sim']} / {m['preemptions']['twin']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument(
        "--policy", action="append", help="repeatable; default: every installed policy"
    )
    parser.add_argument("--max-requests", type=int, help="cap every setting's requests")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument(
        "--no-reserve-full-isl",
        action="store_true",
        help="turn off vLLM's whole-prompt admission check (the simulator has none)",
    )
    args = parser.parse_args()
    import vllm

    policies = args.policy or shipped_policies()
    print(f"vllm {vllm.__version__}; policies {', '.join(policies)}", flush=True)
    results = []
    for name, kw in SETTINGS.items():
        if args.only and name not in args.only:
            continue
        if args.max_requests:
            kw = {**kw, "max_requests": min(kw["max_requests"], args.max_requests)}
        for policy in policies:
            spec = BenchSpec(policies=[policy], **kw)
            result = compare(name, spec, reserve_full_isl=not args.no_reserve_full_isl)
            result["policy"] = policy
            result["vllm"] = vllm.__version__
            results.append(result)
            print(summary_line(result), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
