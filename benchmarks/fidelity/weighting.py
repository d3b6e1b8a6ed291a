"""Which weighting of the step fit replays a real run best (docs/calibration.md, "The fit").

Fits a recorded steps file three ways with ``scipy.optimize.nnls`` (each row divided by
its time, i.e. relative error; by the square root of its time, what ``fit_steps`` does;
and unweighted, i.e. absolute error), replays the recorded run's own trace on the
simulator with each fit, and prints the simulated TTFT/TPOT/E2E percentiles against the
real run's. In-sample by construction (the same run's steps and latencies): it compares
weightings, it does not validate a profile (``loop.py`` does, on other traces).

    schedkit bench --engine vllm --model DIR --workload W --policy fcfs \\
        --record-steps steps --out real               # .venv-vllm
    python benchmarks/fidelity/weighting.py steps/fcfs.csv real/results.json --model DIR
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.sim.cost.calibration import read_steps
from schedkit.sim.cost.fit import TEST_SHARE, with_gaps
from schedkit.sim.cost.model import LINEAR_COEFFICIENTS
from schedkit.sim.cost.profiles import register_model_dir

METRICS = [(m, q) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p90")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=Path)
    parser.add_argument("results", type=Path, help="the recorded run's results.json")
    parser.add_argument("--model", required=True, help="the model directory it served")
    args = parser.parse_args()
    register_model_dir(args.model)
    rows, _ = with_gaps(read_steps(args.steps)[0])
    results = json.loads(args.results.read_text())
    real = results["arms"][0]["metrics"]
    kv_blocks, block_size = (
        results["engine"]["real"]["kv_blocks"],
        results["engine"]["real"]["block_size"],
    )
    x = np.array(
        [[1, r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs] for r in rows], float
    )
    y = np.array([r.seconds for r in rows])
    cut = int(len(y) * (1 - TEST_SHARE))
    print(
        "| weighting | held-out MAPE | held-out time ratio | "
        + " | ".join(f"{m[:-3]} {q}" for m, q in METRICS)
        + " |"
    )
    print("|---|---:|---:|" + "---:|" * len(METRICS))
    for name, weight in (
        ("1/time", 1 / y),
        ("1/sqrt(time)", 1 / np.sqrt(y)),
        ("1", np.ones_like(y)),
    ):
        a = x[:cut] * weight[:cut, None]
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        coef, _ = nnls(a / scale, y[:cut] * weight[:cut])
        coef /= scale
        predicted = x @ coef
        mape = float(np.mean(np.abs(predicted[cut:] - y[cut:]) / y[cut:]))
        ratio = float(predicted[cut:].sum() / y[cut:].sum())
        with tempfile.TemporaryDirectory() as tmp:
            profile = Path(tmp) / "profile.json"
            profile.write_text(
                json.dumps(
                    {"kind": "linear", **dict(zip(LINEAR_COEFFICIENTS, coef.tolist(), strict=True))}
                )
            )
            spec = BenchSpec(workload=results["workload"]["name"], policies=["fcfs"], profile=str(profile),
                             model=args.model, kv_blocks=kv_blocks, block_size=block_size)  # fmt: skip
            sim = run_bench(spec, Path(tmp) / "out")["arms"][0]["metrics"]
        cells = " | ".join(f"{sim[m][q] / real[m][q] - 1:+.1%}" for m, q in METRICS)
        print(f"| {name} | {mape:.1%} | {ratio:.3f} | {cells} |")


if __name__ == "__main__":
    main()
