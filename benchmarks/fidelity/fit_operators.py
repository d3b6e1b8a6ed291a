"""Per-operator efficiency fitted to Vidur's measured operator times (issue #41, first step).

The roofline charges every step max(FLOPs / (70% of peak), bytes / (85% of bandwidth))
plus 0.5 ms. Vidur (microsoft/vidur, MIT licence) measured each operator of a transformer
layer on A100 and H100 per number of tokens and tensor-parallel degree. This script fits,
per GPU and operator class, a few-parameter curve for the time of that work:

- GEMMs (QKV, output, gated-MLP up and down projections, each TP shard's shape):
  ``t = t0 + ((F / (P * ec(M)))**k + (B / (W * em))**k)**(1/k)`` with the compute
  efficiency ``ec(M) = emax * M / (M + m_half)`` rising with the tokens M; F the FLOPs,
  B the bytes (weights, input and output), P peak FLOP/s, W peak bandwidth.
- memory-bound elementwise operators (two RMS norms, RoPE, SiLU-and-mul, residual add):
  ``t = t0 + B / (W * e)``.
- attention, where ``attention.csv`` is present: prefill by chunk and context
  (causal pairs, K/V read), decode by batch and KV length (paged K/V read), each
  ``t = t0 + smoothmax(F / (P * ec), B / (W * em))``.

Each fit minimises the log of predicted over measured time (scipy ``least_squares``), so
errors are relative. Printed and written (``--json``): the fitted numbers, their source
(Vidur commit, files, GPU, model) and, per class, the median and max absolute error on
the fit's own data, beside the roofline-with-constants error for the same operators.

    git clone https://github.com/microsoft/vidur /tmp/vidur    # data is MIT-licensed
    python benchmarks/fidelity/fit_operators.py /tmp/vidur \\
        --json benchmarks/fidelity/fit-operators.json

No Vidur data is copied into this repository; only the fitted figures are.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from schedkit.sim.cost.profiles import get_gpu, get_model, load_profile_file
from schedkit.sim.cost.shape import ModelProfile

HERE = Path(__file__).parent
PROFILES = (HERE / "costmodel-llama-2-7b.toml", HERE / "costmodel-llama-2-70b.toml")
# (Vidur's GPU folder, schedkit GPU) -> [(Vidur's model folder, schedkit model)]
SOURCES = {
    ("a100", "A100-80GB"): [
        ("meta-llama/Meta-Llama-3-8B", "Llama-3-8B"),
        ("meta-llama/Meta-Llama-3-70B", "Llama-3-70B"),
        ("meta-llama/Llama-2-7b-hf", "Llama-2-7B"),
        ("meta-llama/Llama-2-70b-hf", "Llama-2-70B"),
    ],
    ("h100", "H100-SXM"): [
        ("meta-llama/Llama-2-7b-hf", "Llama-2-7B"),
        ("meta-llama/Llama-2-70b-hf", "Llama-2-70B"),
    ],
}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
COMPUTE_EFF, BANDWIDTH_EFF = 0.7, 0.85  # the roofline's constants (schedkit/sim/cost/model.py)
BYTES = 2  # bf16


@dataclass
class Samples:
    """One operator class's work items on one GPU: FLOPs, bytes, a size, measured seconds."""

    flops: list[float] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    size: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    label: list[str] = field(default_factory=list)

    def add(self, flops: float, nbytes: float, size: float, ms: float, label: str) -> None:
        if ms <= 0.0:
            return  # an operator Vidur did not time for this row
        self.flops.append(flops)
        self.nbytes.append(nbytes)
        self.size.append(size)
        self.seconds.append(ms * 1e-3)
        self.label.append(label)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return tuple(
            np.asarray(v, dtype=float) for v in (self.flops, self.nbytes, self.size, self.seconds)
        )  # type: ignore[return-value]


def gemm_shapes(m: ModelProfile, tp: int) -> dict[str, tuple[int, int]]:
    """(K, N) of each GEMM on one of ``tp`` shards: input features, output features."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return {
        "attn_pre_proj": (m.hidden_size, (q + 2 * kv) // tp),
        "attn_post_proj": (q // tp, m.hidden_size),
        "mlp_up_proj": (m.hidden_size, 2 * m.intermediate_size // tp),
        "mlp_down_proj": (m.intermediate_size // tp, m.hidden_size),
    }


def elementwise_bytes(m: ModelProfile, tp: int) -> dict[str, int]:
    """Bytes per token each memory-bound operator reads and writes on one shard."""
    h = m.hidden_size
    rope = (m.num_heads + m.num_kv_heads) * m.head_dim // tp
    return {
        "input_layernorm": 2 * h * BYTES,
        "post_attention_layernorm": 2 * h * BYTES,
        "attn_rope": 2 * rope * BYTES,
        "mlp_act": 3 * m.intermediate_size // tp * BYTES,
        "add": 3 * h * BYTES,
    }


def read_mlp(path: Path, model: ModelProfile, gemm: Samples, elem: Samples) -> int:
    """Add ``mlp.csv``'s rows (every TP degree) to the GEMM and elementwise samples."""
    count = 0
    with path.open() as f:
        for row in csv.DictReader(f):
            tp, n = int(row["num_tensor_parallel_workers"]), int(row["num_tokens"])
            for op, (k, out) in gemm_shapes(model, tp).items():
                nbytes = (k * out + n * k + n * out) * BYTES
                ms = float(row[f"time_stats.{op}.median"])
                gemm.add(2.0 * n * k * out, nbytes, n, ms, f"{model.name}/{op}/tp{tp}")
            for op, per_token in elementwise_bytes(model, tp).items():
                ms = float(row[f"time_stats.{op}.median"])
                elem.add(0.0, float(n * per_token), n, ms, f"{model.name}/{op}/tp{tp}")
            count += 1
    return count


def read_attention(path: Path, model: ModelProfile, prefill: Samples, decode: Samples) -> int:
    """Add ``attention.csv``'s rows: the attention kernel alone (prefill or decode), per layer."""
    kv_per_token = 2 * model.num_kv_heads * model.head_dim * BYTES  # K and V, all shards
    count = 0
    with path.open() as f:
        for row in csv.DictReader(f):
            tp = int(row["num_tensor_parallel_workers"])
            heads, kv_bytes = model.num_heads // tp, kv_per_token // tp
            batch, ctx = int(row["batch_size"]), int(row["kv_cache_size"])
            if row["is_prefill"] == "True":
                c = int(row["prefill_chunk_size"])
                pairs = c * ctx + c * (c + 1) / 2
                nbytes = (ctx + c) * kv_bytes + 2 * c * heads * model.head_dim * BYTES
                ms = float(row["time_stats.attn_prefill.median"])
                prefill.add(
                    4.0 * heads * model.head_dim * pairs,
                    nbytes,
                    c,
                    ms,
                    f"{model.name}/prefill/tp{tp}",
                )
            else:
                pairs = batch * ctx
                nbytes = batch * ctx * kv_bytes
                ms = float(row["time_stats.attn_decode.median"])
                decode.add(
                    4.0 * heads * model.head_dim * pairs,
                    nbytes,
                    batch,
                    ms,
                    f"{model.name}/decode/tp{tp}",
                )
            count += 1
    return count


@dataclass(frozen=True)
class Curve:
    """A few-parameter time model: its parameter names, bounds, start and function."""

    names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    start: tuple[float, ...]
    predict: Callable[..., np.ndarray]


def _roofline_curve(
    p: np.ndarray, f: np.ndarray, b: np.ndarray, m: np.ndarray, peak: float, bw: float
) -> np.ndarray:
    t0, emax, m_half, em, k = p
    compute = f / (peak * emax * m / (m + m_half))
    memory = b / (bw * em)
    return t0 + (compute**k + memory**k) ** (1.0 / k)


def _bandwidth_curve(
    p: np.ndarray, f: np.ndarray, b: np.ndarray, m: np.ndarray, peak: float, bw: float
) -> np.ndarray:
    t0, em = p
    return t0 + b / (bw * em)


ROOFLINE = Curve(
    names=("t0_s", "compute_eff_max", "compute_half_size", "bandwidth_eff", "smoothmax_k"),
    lower=(0.0, 0.05, 0.0, 0.05, 1.0),
    upper=(2e-4, 1.0, 1e6, 1.0, 30.0),
    start=(5e-6, 0.8, 64.0, 0.8, 4.0),
    predict=_roofline_curve,
)
BANDWIDTH = Curve(
    names=("t0_s", "bandwidth_eff"),
    lower=(0.0, 0.05),
    upper=(2e-4, 1.0),
    start=(5e-6, 0.8),
    predict=_bandwidth_curve,
)
CLASSES = {  # operator class -> its curve
    "gemm": ROOFLINE,
    "elementwise": BANDWIDTH,
    "attention_prefill": ROOFLINE,
    "attention_decode": ROOFLINE,
}


def errors(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Median, 90th percentile and max absolute relative error, in percent."""
    e = np.abs(predicted / measured - 1.0) * 100.0
    return {
        "median_pct": round(float(np.median(e)), 1),
        "p90_pct": round(float(np.percentile(e, 90)), 1),
        "max_pct": round(float(e.max()), 1),
    }


def _fit(
    curve: Curve, f: np.ndarray, b: np.ndarray, m: np.ndarray, t: np.ndarray, peak: float, bw: float
) -> np.ndarray:
    """The curve's parameters minimising the squared log of predicted over measured time."""

    def residual(p: np.ndarray) -> np.ndarray:
        return np.log(curve.predict(p, f, b, m, peak, bw) / t)

    bounds = (curve.lower, curve.upper)
    return least_squares(residual, curve.start, bounds=bounds, x_scale="jac").x  # type: ignore[no-any-return]


def fit_class(curve: Curve, samples: Samples, peak: float, bw: float) -> dict[str, object]:
    """Fit ``curve`` to each operator of a class on log time; its parameters and errors,
    the class's errors over all its operators beside the roofline-with-constants'."""
    f, b, m, t = samples.arrays()
    ops = np.asarray([label.split("/")[1] for label in samples.label])
    fitted, params, by_op = np.empty_like(t), {}, {}
    for op in sorted(set(ops)):
        rows = ops == op
        x = _fit(curve, f[rows], b[rows], m[rows], t[rows], peak, bw)
        fitted[rows] = curve.predict(x, f[rows], b[rows], m[rows], peak, bw)
        params[op] = {n: float(f"{v:.4g}") for n, v in zip(curve.names, x, strict=True)}
        by_op[op] = errors(fitted[rows], t[rows])
    constants = np.maximum(f / (peak * COMPUTE_EFF), b / (bw * BANDWIDTH_EFF))
    return {
        "samples": len(t),
        "params": params,
        "fit_error": errors(fitted, t),
        "roofline_constants_error": errors(constants, t),
        "roofline_constants_ratio_median": round(float(np.median(constants / t)), 2),
        "fit_error_by_operator": by_op,
    }


def vidur_commit(root: Path, given: str | None) -> str:
    """The checkout's commit (``git rev-parse``), else ``--vidur-commit``, else unknown."""
    if given:
        return given
    run = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return run.stdout.strip() if run.returncode == 0 else "unknown"


def fit_gpu(root: Path, gpu_dir: str, gpu_name: str) -> dict[str, object]:
    """Every class's fit on one GPU, from the models Vidur profiled that schedkit knows."""
    gpu = get_gpu(gpu_name)
    peak, bw = gpu.tflops * 1e12, gpu.mem_bw_gbs * 1e9
    samples = {name: Samples() for name in CLASSES}
    files: list[str] = []
    for model_dir, model_name in SOURCES[(gpu_dir, gpu_name)]:
        model = get_model(model_name)
        folder = root / "data/profiling/compute" / gpu_dir / model_dir
        for csv_name in ("mlp.csv", "attention.csv"):
            path = folder / csv_name
            if not path.exists():
                continue
            if csv_name == "mlp.csv":
                rows = read_mlp(path, model, samples["gemm"], samples["elementwise"])
            else:
                prefill, decode = samples["attention_prefill"], samples["attention_decode"]
                rows = read_attention(path, model, prefill, decode)
            files.append(f"{path.relative_to(root)} ({model_name}, {rows} rows)")
    fits = {name: fit_class(CLASSES[name], s, peak, bw) for name, s in samples.items() if s.seconds}
    return {"gpu": gpu_name, "vidur_files": files, "classes": fits}


def print_gpu(result: dict[str, object]) -> None:
    print(f"\n{result['gpu']}: " + "; ".join(result["vidur_files"]))  # type: ignore[arg-type]
    print(f"{'class':<18} {'n':>5}  {'fit med/p90/max %':>19}  {'constants med/p90/max %':>24}")
    for name, fit in result["classes"].items():  # type: ignore[attr-defined]
        a, c = fit["fit_error"], fit["roofline_constants_error"]
        print(
            f"{name:<18} {fit['samples']:>5}  "
            f"{a['median_pct']:>5.1f} {a['p90_pct']:>5.1f} {a['max_pct']:>6.1f}    "
            f"{c['median_pct']:>10.1f} {c['p90_pct']:>5.1f} {c['max_pct']:>6.1f}"
        )
        for op, params in fit["params"].items():
            err = fit["fit_error_by_operator"][op]
            values = ", ".join(f"{k}={v}" for k, v in params.items())
            print(f"    {op:<25} {err['median_pct']:>5.1f} {err['max_pct']:>6.1f}  {values}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vidur", type=Path, help="a local checkout of microsoft/vidur")
    parser.add_argument("--vidur-commit", default=None, help="when the checkout has no .git")
    parser.add_argument("--json", type=Path, default=None, help="write the fits here")
    args = parser.parse_args()
    for profile in PROFILES:
        load_profile_file(profile)
    results = [fit_gpu(args.vidur, d, g) for d, g in SOURCES]
    for result in results:
        print_gpu(result)
    if args.json is not None:
        document = {
            "source": "microsoft/vidur data/profiling/compute (MIT licence), time_stats.*.median",
            "vidur_commit": vidur_commit(args.vidur, args.vidur_commit),
            "error": "|predicted / measured - 1| on the fit's own rows, in percent",
            "constants": {"compute_efficiency": COMPUTE_EFF, "bandwidth_efficiency": BANDWIDTH_EFF},
            "gpus": results,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
