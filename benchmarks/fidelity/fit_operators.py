"""Per-operator curves fitted to Vidur's measured kernel times: the simulator's GPU step model (#41).

The roofline charges every step max(FLOPs / (70% of peak), bytes / (85% of bandwidth))
plus 0.5 ms. Vidur (microsoft/vidur, MIT licence) measured each operator of a transformer
layer on A100 and H100 per number of tokens and tensor-parallel degree, and NCCL
all-reduces per size and GPU count. This script fits, per GPU and operator class, the
few-parameter curves of :mod:`schedkit.sim.cost.operators` (imported, so the fit and the
simulator evaluate the same functions):

- GEMMs (QKV, output, gated-MLP up and down projections, each TP shard's shape):
  ``t = t0 + ((F / (P * ec(M)))**k + (B / (W * em))**k)**(1/k)`` with the compute
  efficiency ``ec(M) = emax * M / (M + m_half)`` rising with the tokens M; F the FLOPs,
  B the bytes (weights, input and output), P peak FLOP/s, W peak bandwidth.
- memory-bound operators (two RMS norms, RoPE, SiLU-and-mul, residual add, and from
  ``attention.csv`` writing the new tokens' K/V into the paged cache): ``t = t0 + B / (W * e)``.
- attention, from ``attention.csv``: prefill ``t0 + F / (P * emax * c / (c + c_half))`` over
  the chunk's causal query-key pairs (c the chunk), decode ``t0 + B / (W * emax * n / (n +
  n_half))`` over the K/V bytes the batch of n requests reads.
- all-reduce (``network/<gpu>_dgx/all_reduce.csv``, fp16 elements): ``t0 + bytes / bandwidth``
  per GPU count.

Each fit minimises the log of predicted over measured time (scipy ``least_squares``), so
errors are relative. Printed and written (``--json``): the fitted numbers, their source
(Vidur commit, files, GPU, model) and, per class, the median and max absolute error on
the fit's own data, beside the roofline-with-constants error for the same operators.
``--fits`` writes the simulator's profile (``schedkit/data/operator-fits.json``).

    git clone https://github.com/microsoft/vidur /tmp/vidur && git -C /tmp/vidur lfs pull
    python benchmarks/fidelity/fit_operators.py /tmp/vidur \\
        --json benchmarks/fidelity/fit-operators.json --fits schedkit/data/operator-fits.json

``--attention DIR`` reads the ``attention.csv`` files from another tree of Vidur's layout
(``<gpu>/<org>/<model>/attention.csv``), e.g. rows sampled from a plain-text copy when the
LFS objects cannot be had. No Vidur data is copied into this repository; only the fitted
figures are.
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

from schedkit.sim.cost.operators import ELEMENTWISE as SIM_ELEMENTWISE
from schedkit.sim.cost.operators import (
    GEMMS,
    bandwidth_time,
    decode_attention_time,
    gemm_time,
    prefill_attention_time,
    shard_shapes,
)
from schedkit.sim.cost.profiles import get_gpu, get_model, load_profile_file
from schedkit.sim.cost.shape import ModelProfile

HERE = Path(__file__).parent
PROFILES = tuple(sorted(HERE.glob("costmodel-*.toml")))  # the shapes Vidur profiled
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
SAME_AS = {"H200": "H100-SXM"}  # no Vidur data: H100's efficiencies at H200's peaks
ELEMENTWISE = SIM_ELEMENTWISE[:-1]  # mlp.csv's; the K/V cache write is attention.csv's
COMPUTE_EFF, BANDWIDTH_EFF = 0.7, 0.85  # the roofline's constants (schedkit/sim/cost/model.py)
BYTES = 2  # bf16
# The engine's CPU work per step: Vidur published it for A100 (a vLLM-derived engine,
# Sarathi) at 6d98aa8 and deleted it a week later; read with `git show`.
CPU_OVERHEADS = ("6d98aa8", "data/profiling/a100/cpu_overheads.csv")
CPU_PARTS = ("schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs")


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
    """(K, N) of each GEMM on one of ``tp`` shards, as the simulator charges them."""
    return dict(zip(GEMMS, shard_shapes(m, tp).gemm, strict=True))


def elementwise_bytes(m: ModelProfile, tp: int) -> dict[str, int]:
    """Bytes per token each of ``mlp.csv``'s memory-bound operators reads and writes on
    one shard, as the simulator charges them."""
    per_token = dict(zip(SIM_ELEMENTWISE, shard_shapes(m, tp).elementwise_bytes, strict=True))
    return {op: per_token[op] for op in ELEMENTWISE}


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


def read_attention(
    path: Path, model: ModelProfile, prefill: Samples, decode: Samples, elem: Samples
) -> int:
    """Add ``attention.csv``'s rows: the attention kernel alone (prefill or decode) and
    writing the new tokens' K/V into the cache, per layer and shard. The cache write is
    taken from decode rows only: in prefill rows it takes 19 us for 64 tokens and up to
    1 ms for 2,240, hundreds of times what its bytes need, so it times something else
    there (Vidur's FlashInfer wrapper), not the write."""
    count = 0
    with path.open() as f:
        for row in csv.DictReader(f):
            tp = int(row["num_tensor_parallel_workers"])
            shapes = shard_shapes(model, tp)
            heads = model.num_heads // tp
            kv_bytes = shapes.kv_bytes_per_token
            batch, ctx = int(row["batch_size"]), int(row["kv_cache_size"])
            label = f"{model.name}/{{}}/tp{tp}"
            if row["is_prefill"] == "True":
                c = int(row["prefill_chunk_size"])
                pairs = c * ctx + c * (c + 1) / 2
                nbytes = (ctx + c) * kv_bytes + 2 * c * heads * model.head_dim * BYTES
                ms = float(row["time_stats.attn_prefill.median"])
                flops = shapes.flops_per_pair * pairs
                prefill.add(flops, nbytes, c, ms, label.format("prefill"))
            else:
                pairs = batch * ctx
                ms = float(row["time_stats.attn_decode.median"])
                flops = shapes.flops_per_pair * pairs
                decode.add(flops, batch * ctx * kv_bytes, batch, ms, label.format("decode"))
                save = row.get("time_stats.attn_kv_cache_save.median") or ""  # decode rows only
                if save:  # some files have no such column
                    kv_save = label.format("kv_cache_save")
                    elem.add(0.0, float(batch * kv_bytes), batch, float(save), kv_save)
            count += 1
    return count


def read_all_reduce(path: Path, samples: dict[int, Samples]) -> int:
    """Add ``all_reduce.csv``'s rows (fp16 elements) to the samples of their GPU count:
    the rows with every GPU in one node, as tensor parallelism places them."""
    count = 0
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["collective"] != "all_reduce" or row["devices_per_node"] != row["num_workers"]:
                continue
            workers, nbytes = int(row["num_workers"]), 2.0 * int(row["size"])
            ms = float(row["time_stats.all_reduce.median"])
            samples.setdefault(workers, Samples()).add(0.0, nbytes, nbytes, ms, f"tp{workers}")
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


ROOFLINE = Curve(
    names=("t0_s", "compute_eff_max", "compute_half_size", "bandwidth_eff", "smoothmax_k"),
    lower=(0.0, 0.05, 0.0, 0.05, 1.0),
    upper=(2e-4, 1.0, 1e6, 1.0, 30.0),
    start=(5e-6, 0.8, 64.0, 0.8, 4.0),
    predict=lambda p, f, b, m, peak, bw: gemm_time(p, f, b, m, peak, bw),
)
BANDWIDTH = Curve(
    names=("t0_s", "bandwidth_eff"),
    lower=(0.0, 0.05),
    upper=(2e-4, 1.0),
    start=(5e-6, 0.8),
    predict=lambda p, f, b, m, peak, bw: bandwidth_time(p, b, bw),
)
PREFILL = Curve(
    names=("t0_s", "compute_eff_max", "compute_half_size"),
    lower=(0.0, 0.05, 0.0),
    upper=(2e-4, 1.0, 1e5),
    start=(1e-5, 0.6, 128.0),
    predict=lambda p, f, b, m, peak, bw: prefill_attention_time(p, f, m, peak),
)
DECODE = Curve(
    names=("t0_s", "bandwidth_eff_max", "batch_half_size"),
    lower=(0.0, 0.05, 0.0),
    upper=(2e-4, 1.0, 1e4),
    start=(1e-5, 0.7, 2.0),
    predict=lambda p, f, b, m, peak, bw: decode_attention_time(p, b, m, bw),
)
ALL_REDUCE = Curve(
    names=("t0_s", "gbs"),
    lower=(0.0, 1.0),
    upper=(1e-3, 5000.0),
    start=(2e-5, 100.0),
    predict=lambda p, f, b, m, peak, bw: p[0] + b / (p[1] * 1e9),
)
OVERHEAD = Curve(
    names=("step_overhead_s", "step_overhead_per_request_s"),
    lower=(0.0, 0.0),
    upper=(0.05, 0.01),
    start=(5e-4, 2e-5),
    predict=lambda p, f, b, m, peak, bw: p[0] + p[1] * m,
)
CLASSES = {  # operator class -> its curve
    "gemm": ROOFLINE,
    "elementwise": BANDWIDTH,
    "attention_prefill": PREFILL,
    "attention_decode": DECODE,
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
    curve: Curve,
    f: np.ndarray,
    b: np.ndarray,
    m: np.ndarray,
    t: np.ndarray,
    peak: float,
    bw: float,
    loss: str = "linear",
) -> np.ndarray:
    """The curve's parameters minimising the squared log of predicted over measured time
    (``loss="soft_l1"``: a robust loss, for data with outlying rows)."""

    def residual(p: np.ndarray) -> np.ndarray:
        return np.log(curve.predict(p, f, b, m, peak, bw) / t)

    bounds = (curve.lower, curve.upper)
    fit = least_squares(residual, curve.start, bounds=bounds, x_scale="jac", loss=loss, f_scale=0.1)
    return fit.x  # type: ignore[no-any-return]


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


def fit_all_reduce(samples: dict[int, Samples]) -> dict[str, object]:
    """``t0 + bytes / bandwidth`` per GPU count, with its errors. The fit is robust
    (soft L1): some of Vidur's A100 rows are several times their neighbours' times."""
    out: dict[str, object] = {}
    for workers, s in sorted(samples.items()):
        f, b, m, t = s.arrays()
        x = _fit(ALL_REDUCE, f, b, m, t, 1.0, 1.0, loss="soft_l1")
        out[str(workers)] = {
            "samples": len(t),
            "params": {n: float(f"{v:.4g}") for n, v in zip(ALL_REDUCE.names, x, strict=True)},
            "fit_error": errors(ALL_REDUCE.predict(x, f, b, m, 1.0, 1.0), t),
        }
    return out


def read_cpu_overheads(root: Path, path: Path | None) -> tuple[Samples, str]:
    """Vidur's measured CPU time per step by batch size (every model and TP degree): the
    medians of scheduling, sampling, input preparation and output processing. Its Ray
    communication time is left out: that is Sarathi's workers, not vLLM's executor."""
    where = f"{CPU_OVERHEADS[1]} at {CPU_OVERHEADS[0]}"
    if path is None:
        spec = f"{CPU_OVERHEADS[0]}:{CPU_OVERHEADS[1]}"
        run = subprocess.run(["git", "-C", str(root), "show", spec], capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(f"cannot read {where} from {root}: give --cpu-overheads FILE")
        text = run.stdout
    else:
        text = path.read_text()
    samples = Samples()
    for row in csv.DictReader(text.splitlines()):
        ms = sum(float(row[f"{part}_median"]) for part in CPU_PARTS)
        label = f"{row['model_name']}/overhead/tp{row['tensor_parallel_degree']}"
        samples.add(0.0, 0.0, float(row["batch_size"]), ms, label)
    return samples, where


def fit_overhead(samples: Samples) -> dict[str, object]:
    """``c0 + c1 x requests`` to the measured CPU time per step, with its errors."""
    f, b, m, t = samples.arrays()
    x = _fit(OVERHEAD, f, b, m, t, 1.0, 1.0)
    return {
        "samples": len(t),
        "batch_sizes": sorted({int(v) for v in m}),
        "params": {n: float(f"{v:.4g}") for n, v in zip(OVERHEAD.names, x, strict=True)},
        "fit_error": errors(OVERHEAD.predict(x, f, b, m, 1.0, 1.0), t),
    }


def vidur_commit(root: Path, given: str | None) -> str:
    """The checkout's commit (``git rev-parse``), else ``--vidur-commit``, else unknown."""
    if given:
        return given
    run = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return run.stdout.strip() if run.returncode == 0 else "unknown"


def fit_gpu(root: Path, attention_root: Path, gpu_dir: str, gpu_name: str) -> dict[str, object]:
    """Every class's fit on one GPU, from the models Vidur profiled that schedkit knows."""
    gpu = get_gpu(gpu_name)
    peak, bw = gpu.tflops * 1e12, gpu.mem_bw_gbs * 1e9
    samples = {name: Samples() for name in CLASSES}
    files: list[str] = []
    for model_dir, model_name in SOURCES[(gpu_dir, gpu_name)]:
        model = get_model(model_name)
        mlp = root / "data/profiling/compute" / gpu_dir / model_dir / "mlp.csv"
        if mlp.exists():
            rows = read_mlp(mlp, model, samples["gemm"], samples["elementwise"])
            files.append(f"{mlp.relative_to(root)} ({model_name}, {rows} rows)")
        attention = attention_root / gpu_dir / model_dir / "attention.csv"
        if attention.exists() and attention.read_text()[:8] != "version ":  # not an LFS pointer
            prefill, decode = samples["attention_prefill"], samples["attention_decode"]
            rows = read_attention(attention, model, prefill, decode, samples["elementwise"])
            where = attention.relative_to(attention_root)
            files.append(f"attention {where} ({model_name}, {rows} rows)")
    fits = {name: fit_class(CLASSES[name], s, peak, bw) for name, s in samples.items() if s.seconds}
    reduce: dict[int, Samples] = {}
    network = root / "data/profiling/network" / f"{gpu_dir}_dgx" / "all_reduce.csv"
    if network.exists():
        rows = read_all_reduce(network, reduce)
        files.append(f"{network.relative_to(root)} ({rows} rows)")
    return {
        "gpu": gpu_name,
        "vidur_files": files,
        "classes": fits,
        "all_reduce": fit_all_reduce(reduce),
    }


def simulator_fits(
    result: dict[str, object], commit: str, overhead: dict[str, object], where: str
) -> dict[str, object]:
    """One GPU's curves as ``schedkit.sim.cost.operators.OperatorFits`` reads them."""
    classes = result["classes"]  # type: ignore[index]
    missing = {"gemm", "elementwise", "attention_prefill", "attention_decode"} - set(classes)
    if missing or not result["all_reduce"]:
        raise SystemExit(f"{result['gpu']}: no data for {sorted(missing) or 'all-reduce'}")
    gemm = classes["gemm"]["params"]  # type: ignore[index]
    elementwise = classes["elementwise"]["params"]  # type: ignore[index]
    return {
        "source": f"Vidur {commit[:7]} measured kernels on {result['gpu']}, fitted by"
        " benchmarks/fidelity/fit_operators.py"
        + "".join(f"; {f}" for f in result["vidur_files"] if "no rows here" in f),  # type: ignore[attr-defined]
        "gemm": {op: gemm[op] for op in GEMMS},
        "elementwise": {op: elementwise[op] for op in SIM_ELEMENTWISE},
        "attention_prefill": classes["attention_prefill"]["params"]["prefill"],  # type: ignore[index]
        "attention_decode": classes["attention_decode"]["params"]["decode"],  # type: ignore[index]
        "all_reduce": {w: fit["params"] for w, fit in result["all_reduce"].items()},  # type: ignore[attr-defined]
        **overhead["params"],  # type: ignore[dict-item]
        "overhead_source": f"Vidur {where}: CPU time per step of a vLLM-derived engine on an"
        " A100 host (scheduling, sampling, input preparation, output processing), batch"
        " 8-128, fitted by benchmarks/fidelity/fit_operators.py",
    }


def borrow_missing(results: list[dict[str, object]]) -> None:
    """A GPU with no attention rows (or no timed K/V cache write) takes the first GPU's
    curves for them: the same efficiencies at its own peaks. Its files list says so."""
    for result in results:
        classes = result["classes"]  # type: ignore[index]
        for name in ("attention_prefill", "attention_decode"):
            donor = next((r for r in results if name in r["classes"]), None)  # type: ignore[operator]
            if name not in classes and donor is not None:
                classes[name] = donor["classes"][name]  # type: ignore[index]
                result["vidur_files"].append(f"{name}: {donor['gpu']}'s curve (no rows here)")  # type: ignore[attr-defined]
        params = classes["elementwise"]["params"]
        donor = next(
            (r for r in results if "kv_cache_save" in r["classes"]["elementwise"]["params"]), None
        )  # type: ignore[index]
        if "kv_cache_save" not in params and donor is not None:
            params["kv_cache_save"] = donor["classes"]["elementwise"]["params"]["kv_cache_save"]  # type: ignore[index]
            result["vidur_files"].append(f"kv_cache_save: {donor['gpu']}'s curve (no rows here)")  # type: ignore[attr-defined]


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
    for workers, fit in result["all_reduce"].items():  # type: ignore[attr-defined]
        a = fit["fit_error"]
        values = ", ".join(f"{k}={v}" for k, v in fit["params"].items())
        print(
            f"all_reduce tp{workers:<6} {fit['samples']:>5}  {a['median_pct']:>5.1f} {a['p90_pct']:>5.1f} {a['max_pct']:>6.1f}  {values}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vidur", type=Path, help="a local checkout of microsoft/vidur")
    parser.add_argument(
        "--attention",
        type=Path,
        default=None,
        help="a tree of <gpu>/<org>/<model>/attention.csv (default: the checkout's)",
    )
    parser.add_argument("--vidur-commit", default=None, help="when the checkout has no .git")
    parser.add_argument("--json", type=Path, default=None, help="write the fits and errors here")
    parser.add_argument(
        "--fits", type=Path, default=None, help="write the simulator's profile here"
    )
    parser.add_argument(
        "--cpu-overheads",
        type=Path,
        default=None,
        help=f"Vidur's {CPU_OVERHEADS[1]} (default: `git show` it at {CPU_OVERHEADS[0]})",
    )
    args = parser.parse_args()
    for profile in PROFILES:
        load_profile_file(profile)
    attention_root = args.attention or args.vidur / "data/profiling/compute"
    results = [fit_gpu(args.vidur, attention_root, d, g) for d, g in SOURCES]
    for result in results:
        print_gpu(result)
    commit = vidur_commit(args.vidur, args.vidur_commit)
    cpu, where = read_cpu_overheads(args.vidur, args.cpu_overheads)
    overhead = fit_overhead(cpu)
    a = overhead["fit_error"]
    print(
        f"\nstep overhead ({where}): {overhead['params']}, error median {a['median_pct']}%"  # type: ignore[index]
        f" / p90 {a['p90_pct']}% / max {a['max_pct']}% over {overhead['samples']} rows"
    )  # type: ignore[index]
    if args.json is not None:
        document = {
            "source": "microsoft/vidur data/profiling (MIT licence), time_stats.*.median",
            "vidur_commit": commit,
            "attention_files": str(args.attention) if args.attention else "the checkout's",
            "error": "|predicted / measured - 1| on the fit's own rows, in percent",
            "constants": {"compute_efficiency": COMPUTE_EFF, "bandwidth_efficiency": BANDWIDTH_EFF},
            "gpus": results,
            "step_overhead": {"source": where, **overhead},
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if args.fits is not None:
        borrow_missing(results)
        profile = {
            "about": "Per-operator step-time curves (schedkit.sim.cost.operators), fitted to"
            " Vidur's measured kernels (microsoft/vidur, MIT licence) by"
            " benchmarks/fidelity/fit_operators.py; see benchmarks/fidelity/costmodel.md",
            "gpus": {r["gpu"]: simulator_fits(r, commit, overhead, where) for r in results},
            "same_as": SAME_AS,
        }
        args.fits.write_text(json.dumps(profile, indent=1) + "\n")


if __name__ == "__main__":
    main()
