"""sjf and slo on the real vLLM CPU engine (tiny random-weight Llama) next to the simulator.

Issue #6: "On the real vLLM CPU engine (tiny model): at least `lcf` or `sjf` and one eviction
or admission policy show the same direction of effect as on the simulator." This script builds
the tiny model directory of ``adapters/vllm/tests/test_real.py`` in a temporary directory and
runs, for each engine (``--engine vllm --model DIR`` and ``--engine sim --model DIR``, the sim
reading the same ``config.json`` as a model profile on its default H100 profile):

1. **sjf vs fcfs** (head-of-line blocking): a burst of 60 requests with spread lengths
   (prompt lognormal mean 32, output lognormal mean 24), ``--max-num-seqs 2`` so they queue.
   Arms: ``fcfs``, ``sjf`` (defaults, learned predictor), ``benchmarks/policies/sjf-oracle.toml``.
   A burst makes the queue independent of the engine's speed: every request waits on both.
2. **slo admission vs fcfs** (sustained overload): first a calibration burst (fcfs, 60
   requests, prompt 256, output 8, ``--max-num-batched-tokens 256``) measures the engine's
   capacity C (requests/s) and prefill throughput P (prompt tokens/s). Then 240 requests
   arrive as a Poisson stream at 2C, judged with a TTFT SLO of 20 service times (20/C), and
   ``slo`` runs with that target and ``prefill_tokens_per_s = P`` (a config file written into
   the temporary directory). Prompts are all the same length, so EDF orders as fcfs does:
   the difference is admission alone. Both engines get the same load *relative to their
   own capacity* (the sim's H100 is ~15x faster than the 2-core CPU).

Every step runs for seeds 0, 1, 2 (the synthetic workload's draws; the sim is deterministic,
the real engine's wall clock is not). Prints the figures and writes ``summary.json`` to the
output directory.

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/real_engine.py \
        --out /tmp/sk/real-engine
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from schedkit.testing.models import VLLM_CPU, tiny_llama

ROOT = Path(__file__).resolve().parents[2]
SCHEDKIT = str(Path(sys.executable).with_name("schedkit"))
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}

SJF_WORKLOAD = "poisson:rate=1000,n=60,prompt=lognormal:32:0.8,output=lognormal:24:1.0"
CAL_WORKLOAD = "poisson:rate=10000,n=60,prompt=const:256,output=const:8"
SLO_N, SLO_LOAD, SLO_SERVICE_TIMES = 240, 2.0, 20
SLO_ENGINE_ARGS = ["--max-num-batched-tokens", "256"]


def bench(args: list[str], out: Path) -> dict[str, Any]:
    cmd = [SCHEDKIT, "bench", *args, "--out", str(out), "--overwrite"]  # a rerun replaces
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(
        cmd, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    if proc.returncode != 0:
        sys.exit(f"bench failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


def arm_metrics(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {arm["policy"]: arm["metrics"] for arm in results["arms"]}


def run_sjf(engine: str, model: Path, seed: int, out: Path) -> dict[str, Any]:
    res = bench(
        ["--engine", engine, "--model", str(model), "--workload", SJF_WORKLOAD,
         "--seed", str(seed), "--max-num-seqs", "2",
         "--policy", "fcfs", "--policy", "sjf", "--policy", "benchmarks/policies/sjf-oracle.toml"],
        out / f"sjf-{engine}-s{seed}",
    )  # fmt: skip
    assert res["engine"].get("real", {}).get("clipped_requests", 0) == 0
    return {
        name: {
            "ttft_p50_ms": m["ttft_ms"]["p50"],
            "ttft_p90_ms": m["ttft_ms"]["p90"],
            "ttft_mean_ms": m["ttft_ms"]["mean"],
            "completed": m["completed"],
        }
        for name, m in arm_metrics(res).items()
    }


def run_slo(engine: str, model: Path, seed: int, out: Path) -> dict[str, Any]:
    base = ["--engine", engine, "--model", str(model), *SLO_ENGINE_ARGS, "--seed", str(seed)]
    cal = arm_metrics(bench([*base, "--workload", CAL_WORKLOAD, "--policy", "fcfs"],
                            out / f"slo-cal-{engine}-s{seed}"))["fcfs"]  # fmt: skip
    capacity = cal["completed"] / cal["duration_s"]  # requests/s
    prefill_tps = 256 * cal["completed"] / cal["duration_s"]  # prompt tokens/s, decode included
    rate = round(SLO_LOAD * capacity, 1)
    slo_ms = round(SLO_SERVICE_TIMES * 1000.0 / capacity, 1)
    config = out / f"slo-{engine}-s{seed}.toml"
    config.write_text(
        f'policy = ["slo"]\n\n[options.slo]\nttft_ms = {slo_ms}\n'
        f"prefill_tokens_per_s = {round(prefill_tps)}\n"
    )
    workload = f"poisson:rate={rate},n={SLO_N},prompt=const:256,output=const:8"
    res = bench(
        [*base, "--workload", workload, "--slo-ttft-ms", str(slo_ms),
         "--policy", "fcfs", "--policy", str(config)],
        out / f"slo-{engine}-s{seed}",
    )  # fmt: skip
    arms = {}
    for name, m in arm_metrics(res).items():
        met = round(m["slo_attainment"] * m["requests"])
        arms["fcfs" if name == "fcfs" else "slo"] = {
            "slo_attainment": m["slo_attainment"],  # over all requests; rejected = missed
            "met": met,
            "rejected": m["rejected"],
            "attainment_of_admitted": met / max(1, m["requests"] - m["rejected"]),
            "ttft_p50_ms": m["ttft_ms"]["p50"],
            "ttft_p90_ms": m["ttft_ms"]["p90"],
            "goodput_req_s": met / m["duration_s"],
            "duration_s": m["duration_s"],
        }
    return {"capacity_req_s": capacity, "prefill_tok_s": prefill_tps, "rate_req_s": rate,
            "slo_ttft_ms": slo_ms, "arms": arms}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/real-engine"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"sjf": {}, "slo": {}}
    with tempfile.TemporaryDirectory(prefix="tiny-llama-") as tmp:
        model = tiny_llama(Path(tmp) / "tiny-llama", **VLLM_CPU)
        for engine in ("vllm", "sim"):
            for seed in args.seeds:
                summary["sjf"][f"{engine}/s{seed}"] = run_sjf(engine, model, seed, args.out)
                summary["slo"][f"{engine}/s{seed}"] = run_slo(engine, model, seed, args.out)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))

    print("\nsjf vs fcfs: TTFT p50 / p90 / mean (ms)")
    for key, arms in summary["sjf"].items():
        row = "  ".join(
            f"{name.split('/')[-1].removesuffix('.toml')}: {a['ttft_p50_ms']:.1f} / "
            f"{a['ttft_p90_ms']:.1f} / {a['ttft_mean_ms']:.1f}"
            for name, a in arms.items()
        )
        print(f"{key:8} {row}")
    print("\nslo vs fcfs: attainment (all) | met | rejected | attainment of admitted | goodput")
    for key, r in summary["slo"].items():
        head = (f"{key:8} C={r['capacity_req_s']:.0f}/s rate={r['rate_req_s']}/s "
                f"SLO={r['slo_ttft_ms']} ms")  # fmt: skip
        print(head)
        for name, a in r["arms"].items():
            print(
                f"    {name:5} {a['slo_attainment']:.3f} | {a['met']:3d} | {a['rejected']:3d} | "
                f"{a['attainment_of_admitted']:.3f} | {a['goodput_req_s']:.1f} req/s "
                f"(TTFT p50 {a['ttft_p50_ms']:.1f} p90 {a['ttft_p90_ms']:.1f} ms)"
            )
    print(f"\nwrote {args.out / 'summary.json'}")


if __name__ == "__main__":
    main()
