"""The calibration loop (issue #15 parts 3 and 4): record a real engine's steps (vLLM or
SGLang) on one trace, fit a cost profile, then replay different traces on the simulator
with that profile and on the real engine, and compare.

On this machine (CPU, a random-weight 2-layer Llama, hidden 256, as the adapters' tests
use)::

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-vllm/bin/python benchmarks/fidelity/loop.py \\
        --json benchmarks/fidelity/cpu-loop.json
    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/loop.py \\
        --engine sglang --json benchmarks/fidelity/cpu-loop-sglang.json

On a GPU, with your model (the same code path; ``--gpu`` names the GPU profile of the
roofline reference that coefficients nothing varies for fall back to)::

    python benchmarks/fidelity/loop.py --model /path/to/model --gpu H100-SXM --json gpu-loop.json

The training trace and the test traces differ in seed and rate. The simulator gets the
real engine's KV capacity and block size, so that both schedule under the same limits.
Each test trace is replayed under fcfs and sjf, which change the schedule, to compare
the simulated A/B difference with the real one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.sim.calibration import read_steps, save_cost_profile
from schedkit.sim.costmodel import RooflineCostModel
from schedkit.sim.fit import fit_steps
from schedkit.sim.profiles import get_gpu, get_model, register_model_dir

TRAIN = "poisson:rate=12,n=400,prompt=96,output=24,seed=11"
TESTS = {
    "same-rate": "poisson:rate=12,n=300,prompt=96,output=24,seed=23",
    "busier": "gamma:rate=18,cv=2,n=300,prompt=128,output=24,seed=37",
}
POLICIES = ["fcfs", "sjf"]
METRICS = (("ttft_ms", "p50"), ("ttft_ms", "p90"), ("tpot_ms", "p50"), ("tpot_ms", "p90"),
           ("e2e_ms", "p50"), ("e2e_ms", "p90"))  # fmt: skip


def tiny_model(path: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=4,
        num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


def metrics(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {
        arm["policy"]: {f"{m}_{q}": arm["metrics"][m][q] for m, q in METRICS}
        for arm in results["arms"]
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--model", default=None, help="model directory (default: a tiny one)")
    parser.add_argument("--gpu", default="H100-SXM", help="GPU profile of the reference")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    args = parser.parse_args()
    engine = args.engine
    out = args.out or Path(tempfile.mkdtemp(prefix="cpu-loop-"))
    model = args.model or str(tiny_model(out / "model"))
    register_model_dir(model)
    # 1. record the real engine on the training trace
    train = run_bench(
        BenchSpec(workload=TRAIN, policies=["fcfs"], engine=engine, model=model,
                  record_steps=str(out / "steps")),
        out / "train",
    )  # fmt: skip
    real = train["engine"]["real"]
    rows, meta = read_steps(out / "steps" / "fcfs.csv")
    reference = RooflineCostModel(get_model(model), get_gpu(args.gpu))
    fit = fit_steps(rows, reference)
    profile = out / "cpu-profile.json"
    save_cost_profile(fit, profile, source="steps/fcfs.csv", recorded_for=meta)
    print(f"recorded {len(rows)} steps; held-out {fit.holdout}")
    for warning in fit.warnings:
        print("warning:", warning)
    # 2. the same settings on both engines: the real engine's capacity and block size
    # (SGLang counts tokens: its capacity in the simulator's 16-token blocks, which the
    # SGLang arms get back as max_total_tokens)
    if engine == "vllm":
        kv_blocks, block_size = real["kv_blocks"], real["block_size"]
    else:
        kv_blocks, block_size = real["kv_tokens"] // 16, 16
    report: dict[str, Any] = {
        "engine": engine, "train": TRAIN, "steps": len(rows), "fit": fit.describe(),
        "coefficients": fit.model.describe(), "kv_blocks": kv_blocks,
        "block_size": block_size, "tests": {},
    }  # fmt: skip
    common = {"model": model, "kv_blocks": kv_blocks, "block_size": block_size}
    for name, workload in TESTS.items():
        sim = run_bench(
            BenchSpec(workload=workload, policies=POLICIES, profile=str(profile), **common),
            out / f"{name}-sim",
        )
        live = run_bench(
            BenchSpec(workload=workload, policies=POLICIES, engine=engine, **common),
            out / f"{name}-real",
        )
        s, r = metrics(sim), metrics(live)
        errors = {
            policy: {k: s[policy][k] / r[policy][k] - 1 for k in r[policy] if r[policy][k]}
            for policy in POLICIES
        }
        ab = {
            k: {"sim": s["sjf"][k] / s["fcfs"][k] - 1, "real": r["sjf"][k] / r["fcfs"][k] - 1}
            for k in r["fcfs"]
            if r["fcfs"][k] and s["fcfs"][k]
        }
        report["tests"][name] = {
            "workload": workload,
            "sim": s,
            "real": r,
            "error": errors,
            "ab": ab,
        }
        print(f"\n{name} ({workload})")
        for policy in POLICIES:
            cells = ", ".join(f"{k} {v:+.1%}" for k, v in errors[policy].items())
            print(f"  {policy}: sim vs real: {cells}")
        for k, v in ab.items():
            print(f"  sjf vs fcfs {k}: sim {v['sim']:+.1%}, real {v['real']:+.1%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
