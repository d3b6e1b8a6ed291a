"""The calibration loop within one engine process: fit a trace's first window, test its later one.

``loop.py`` fits a profile on one engine's run and tests it on other engines' runs. On
a shared 2-core machine engines a minute apart differ in speed by up to 0.7-1.4x
(``benchmarks/speed/sglang/idle-cost-spread.json``), so its held-out error mixes the
simulator's error with that. This is issue #15's other held-out design, "a later
window": every real arm runs one trace in one engine. Its steps before the first
request of the trace's second half arrives are fitted, and the simulator, given that
profile, replays the whole trace. Then both are compared on the second half's requests,
whose steps the fit never saw. Every round and arm is its own paired comparison (its
own engine, its own profile), so no median is taken across engines. The sjf A/B is read
the same way: the simulated sjf-vs-fcfs difference against the real one, per round.

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/window.py \\
        --engine sglang --rate-scale 0.16 --rounds 2 --json benchmarks/fidelity/window-sglang.json
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path
from typing import Any

from loop import METRICS, POLICIES, SIM, WARMUP, engine_model, step_bias

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.bench.stats.estimators import percentile
from schedkit.sim.cost.calibration import read_steps, save_cost_profile
from schedkit.sim.cost.fit import fit_steps, with_gaps

# loop.py's tests, twice as long: the first half trains, the second tests
TESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "same-rate": ("poisson:rate=12,n=600,prompt=96,output=24,seed=23", {}),
    "queued": ("gamma:rate=10,cv=2,n=500,prompt=96,output=24,seed=41", {"max_num_seqs": 8}),
}
TARGET = 0.10


def requests(directory: Path, arm: str) -> list[dict[str, Any]]:
    """``arm``'s rows of a bench run's per-request table: requests.parquet where pyarrow
    wrote it, else requests.csv (the engines' environments have no pyarrow)."""
    if (directory / "requests.parquet").exists():
        import pyarrow.parquet as pq

        table = pq.read_table(directory / "requests.parquet").to_pylist()
    else:
        with (directory / "requests.csv").open() as f:
            table = list(csv.DictReader(f))
    return [r for r in table if r["arm"] == arm]


def latency(row: dict[str, Any], metric: str) -> float | None:
    value = row[metric]
    return None if value in (None, "") else float(value)


def window_metrics(directory: Path, arm: str, test_ids: set[str]) -> dict[str, float]:
    """p50 and p90 of each latency over the test window's requests."""
    rows = [r for r in requests(directory, arm) if r["request_id"] in test_ids]
    out = {}
    for metric, q in METRICS:
        values = sorted(v for r in rows if (v := latency(r, metric)) is not None)
        out[f"{metric}_{q}"] = percentile(values, int(q[1:]))  # as the bench's own
    return out


def split(directory: Path, arm: str) -> tuple[set[str], float, float]:
    """The second half's request ids (by arrival), when its first request arrived and
    when the first request did (seconds, the run's clock)."""
    rows = sorted(requests(directory, arm), key=lambda r: float(r["arrival_s"]))
    half = rows[len(rows) // 2 :]
    return {r["request_id"] for r in half}, float(half[0]["arrival_s"]), float(rows[0]["arrival_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="sglang")
    parser.add_argument("--tests", default="queued", help=f"comma-separated, of {', '.join(TESTS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--random", default="mid")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--max-requests", type=int, default=None, help="a shorter run")
    args = parser.parse_args()
    tests = [t for t in args.tests.split(",") if t]
    if not tests or set(tests) - set(TESTS):
        parser.error(f"--tests: choose from {', '.join(TESTS)}")
    out = Path(tempfile.mkdtemp(prefix="window-"))
    model, reference = engine_model(out, None, args.random, args.gpu)
    real_settings = {"vllm": {"gpu_memory_utilization": 0.5}, "sglang": {}}[args.engine]
    base = {"engine": args.engine, "model": model, "rate_scale": args.rate_scale,
            "max_requests": args.max_requests}  # fmt: skip
    run_bench(BenchSpec(workload=WARMUP, policies=["fcfs"], **base, **real_settings), out / "w")
    report: dict[str, Any] = {"engine": args.engine, "rate_scale": args.rate_scale, "tests": {}}
    for name in tests:
        workload, settings = TESTS[name]
        rounds = []
        for i in range(args.rounds):
            order = POLICIES if i % 2 == 0 else POLICIES[::-1]
            recorded, real_dir = out / f"{name}-steps-{i}", out / f"{name}-real-{i}"
            spec = BenchSpec(workload=workload, policies=order, record_steps=str(recorded),
                             **base, **settings, **real_settings)  # fmt: skip
            real = run_bench(spec, real_dir)["engine"]["real"]
            if args.engine == "vllm":
                capacity = {"kv_blocks": real["kv_blocks"], "block_size": real["block_size"]}
            else:
                capacity = {"kv_blocks": real["kv_tokens"] // 16, "block_size": 16}
            arms: dict[str, Any] = {}
            for policy in order:
                test_ids, test_start, first = split(real_dir, policy)
                rows, meta = read_steps(recorded / f"{policy}.csv")
                rows = with_gaps(rows)[0]
                t0 = rows[0].start_s or 0.0  # the first step starts as the first request comes
                cut = t0 + (test_start - first)
                train = [r for r in rows if (r.end_s or 0.0) <= cut]
                held = [r for r in rows if (r.start_s or 0.0) >= cut]
                fit = fit_steps(train, reference)
                profile = out / f"{name}-{i}-{policy}.json"
                save_cost_profile(fit, profile, source=f"{name} round {i}", recorded_for=meta)
                sim_spec = BenchSpec(
                    workload=workload, policies=[policy], profile=str(profile), model=model,
                    rate_scale=args.rate_scale, max_requests=args.max_requests, gpu=args.gpu,
                    **capacity, **settings, **SIM[args.engine],
                )  # fmt: skip
                sim_dir = out / f"{name}-sim-{i}-{policy}"
                run_bench(sim_spec, sim_dir)
                real_m = window_metrics(real_dir, policy, test_ids)
                sim_m = window_metrics(sim_dir, policy, test_ids)
                arms[policy] = {
                    "train_steps": len(train), "test_steps": len(held),
                    "fit_holdout_mape": fit.holdout.get("all", {}).get("mape"),
                    "test_window_steps": step_bias(fit.model, held),
                    "real": real_m, "sim": sim_m,
                    "error": {k: sim_m[k] / v - 1 for k, v in real_m.items() if v},
                }  # fmt: skip
            ab = {
                side: {k: arms["sjf"][side][k] / v - 1 for k, v in arms["fcfs"][side].items()}
                for side in ("sim", "real")
            }
            rounds.append({"order": order, "arms": arms, "ab": ab})
            print(f"{name} round {i} ({', '.join(order)})")
            for policy, a in arms.items():
                cells = ", ".join(f"{k} {v:+.1%}" for k, v in a["error"].items())
                bias = a["test_window_steps"]
                print(f"  {policy}: {a['train_steps']} steps fitted, {a['test_steps']} held out"
                      f" (predicted / measured {bias['time_ratio']:.3f}, MAPE {bias['mape']:.1%})")  # fmt: skip
                print(f"  {policy}: sim vs real on the second half: {cells}")
            for k, v in ab["sim"].items():
                print(f"  sjf vs fcfs {k}: sim {v:+.1%}, real {ab['real'][k]:+.1%}")
            report["tests"][name] = {"workload": workload, "settings": settings, "rounds": rounds}
            if args.json:
                args.json.write_text(json.dumps(report, indent=2, default=str))
    print(table(report))


def table(report: dict[str, Any]) -> str:
    """Markdown: every round's error per cell, and how many TTFT/TPOT cells are within
    the target."""
    keys = [f"{m}_{q}" for m, q in METRICS]
    lines = ["| test | round | policy | " + " | ".join(keys) + " |", "|---" * (len(keys) + 3) + "|"]
    within = total = 0
    for name, test in report["tests"].items():
        for i, r in enumerate(test["rounds"]):
            for policy, a in r["arms"].items():
                cells = [f"{a['error'][k]:+.1%}" for k in keys]
                lines.append(f"| {name} | {i} | {policy} | " + " | ".join(cells) + " |")
                for k in keys:
                    if k.startswith(("ttft", "tpot")):
                        total += 1
                        within += abs(a["error"][k]) <= TARGET
    lines += ["", f"TTFT/TPOT cells within {TARGET:.0%}: {within} of {total}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
