"""A transformer layer's kernels timed in plain PyTorch, against the fitted curves (#41 item 4).

Times, at one tensor-parallel shard's shapes of a schedkit model profile: the layer's GEMMs
(QKV, output, gated-MLP up and down) and the LM head per number of tokens; the memory-bound
elementwise operators (RMS norm, SiLU-and-mul, a RoPE-like rotation, the residual add);
attention prefill (``scaled_dot_product_attention``, causal, by chunk and context; and the
flash backend alone where ``torch.backends.cuda.flash_sdp_enabled()``); attention decode by
batch and KV length, on contiguous K/V and through a paged-KV gather (``index_select`` of
blocks from a block pool), the gather also timed alone. CUDA events on a GPU, the median of
the repeats after a warm-up; ``time.perf_counter`` on CPU.

Writes ``--out``: a JSON profile (device, torch version, model, TP, dtype, shapes and, per
operator, its points: size, median seconds, and the FLOPs and bytes the fitted curves use).
With ``--compare`` (``benchmarks/fidelity/fit-operators.json``) and ``--gpu``, each point is
also predicted by ``fit_operators.py``'s own curve functions (imported, not reimplemented);
the table is printed and written beside the profile (``<out>.compare.txt``).

    python benchmarks/gpu/kernels.py --model Llama-3-8B --device cuda --out gpu-profile.json \\
        --compare benchmarks/fidelity/fit-operators.json --gpu H100-SXM

``--tiny`` shrinks the model and the sizes so that the whole run takes seconds on a CPU
(the test suite runs it so the script cannot rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fidelity"))
from fit_operators import (
    BYTES,
    CLASSES,
    SAME_AS,
    borrow_missing,
    elementwise_bytes,
    gemm_shapes,
)

from schedkit.sim.cost.profiles import get_gpu, get_model
from schedkit.sim.cost.shape import ModelProfile

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LM_HEAD_TOKENS = 4096  # the LM head runs on sampled tokens only: at most one per sequence
PREFILL = ((128, 0), (512, 0), (2048, 0), (8192, 0), (512, 2048), (2048, 8192), (512, 16384))
DECODE = ((1, 1024), (8, 1024), (32, 2048), (64, 4096), (128, 2048), (256, 1024), (32, 16384))
BLOCK_SIZE = 16  # tokens per KV block (vLLM's default)
TINY_TOKENS = (1, 4, 16, 64)
TINY_PREFILL = ((16, 0), (32, 32))
TINY_DECODE = ((1, 64), (4, 128))
# (class, the fitted curve's operator) each measured operator is compared with
FIT_OF = {
    "attn_pre_proj": ("gemm", "attn_pre_proj"),
    "attn_post_proj": ("gemm", "attn_post_proj"),
    "mlp_up_proj": ("gemm", "mlp_up_proj"),
    "mlp_down_proj": ("gemm", "mlp_down_proj"),
    "rmsnorm": ("elementwise", "input_layernorm"),
    "silu_and_mul": ("elementwise", "mlp_act"),
    "rope": ("elementwise", "attn_rope"),
    "add": ("elementwise", "add"),
    "attention_prefill": ("attention_prefill", "prefill"),
    "attention_prefill_flash": ("attention_prefill", "prefill"),
    "attention_decode": ("attention_decode", "decode"),
    "attention_decode_paged": ("attention_decode", "decode"),
}


@dataclasses.dataclass(frozen=True)
class Setup:
    """Where and how to time: device, dtype, repeats, and the sizes to sweep."""

    device: torch.device
    dtype: torch.dtype
    warmup: int
    repeats: int
    tokens: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]
    decode: tuple[tuple[int, int], ...]


def median_seconds(fn: Callable[[], object], setup: Setup) -> float:
    """The median time of ``fn`` over the repeats, after the warm-up calls."""
    for _ in range(setup.warmup):
        fn()
    times = []
    if setup.device.type == "cuda":
        torch.cuda.synchronize()
        pairs = []
        for _ in range(setup.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) * 1e-3 for start, end in pairs]
    else:
        for _ in range(setup.repeats):
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
    return statistics.median(times)


def point(size: dict[str, int], seconds: float, flops: float, nbytes: float) -> dict[str, object]:
    """One measured point, with the work the fitted curves charge for it (bf16 bytes)."""
    return {**size, "seconds": seconds, "flops": flops, "bytes": nbytes}


def time_gemms(m: ModelProfile, tp: int, setup: Setup) -> dict[str, list[dict[str, object]]]:
    """The layer's four GEMMs per token count, and the LM head (vocab split over TP)."""
    shapes = dict(gemm_shapes(m, tp))
    shapes["lm_head"] = (m.hidden_size, m.vocab_size // tp)
    out: dict[str, list[dict[str, object]]] = {}
    kw = {"device": setup.device, "dtype": setup.dtype}
    for op, (k, n_out) in shapes.items():
        weight = torch.randn(n_out, k, **kw) * 0.02  # type: ignore[arg-type]
        out[op] = []
        for n in setup.tokens:
            if op == "lm_head" and n > LM_HEAD_TOKENS:
                continue
            x = torch.randn(n, k, **kw)  # type: ignore[arg-type]
            seconds = median_seconds(lambda x=x, w=weight: F.linear(x, w), setup)
            nbytes = (k * n_out + n * k + n * n_out) * BYTES
            out[op].append(point({"tokens": n}, seconds, 2.0 * n * k * n_out, nbytes))
        del weight
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, 1e-5)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate half of each head (NeoX style), as a RoPE kernel reads and writes it."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def elementwise_runs(
    n: int, m: ModelProfile, tp: int, setup: Setup
) -> dict[str, Callable[[], object]]:
    """RMS norm, SiLU-and-mul, RoPE-like rotation and residual add on ``n`` tokens."""
    kw = {"device": setup.device, "dtype": setup.dtype}
    h, inter, d = m.hidden_size, m.intermediate_size // tp, m.head_dim
    heads = (m.num_heads + m.num_kv_heads) // tp
    norm_weight = torch.ones(h, **kw)  # type: ignore[arg-type]
    x, r = torch.randn(n, h, **kw), torch.randn(n, h, **kw)  # type: ignore[arg-type]
    gate_up = torch.randn(n, 2 * inter, **kw)  # type: ignore[arg-type]
    qk = torch.randn(n, heads, d, **kw)  # type: ignore[arg-type]
    cos, sin = torch.randn(n, 1, d, **kw), torch.randn(n, 1, d, **kw)  # type: ignore[arg-type]
    return {
        "rmsnorm": lambda: rms_norm(x, norm_weight),
        "silu_and_mul": lambda: F.silu(gate_up[:, :inter]) * gate_up[:, inter:],
        "rope": lambda: rope(qk, cos, sin),
        "add": lambda: x.add_(r),
    }


def time_elementwise(m: ModelProfile, tp: int, setup: Setup) -> dict[str, list[dict[str, object]]]:
    """The elementwise operators per token count, with the bytes the fitted curves charge."""
    per_token = elementwise_bytes(m, tp)
    bytes_of = {
        "rmsnorm": per_token["input_layernorm"],
        "silu_and_mul": per_token["mlp_act"],
        "rope": per_token["attn_rope"],
        "add": per_token["add"],
    }
    out: dict[str, list[dict[str, object]]] = {op: [] for op in bytes_of}
    for n in setup.tokens:
        for op, fn in elementwise_runs(n, m, tp, setup).items():
            seconds = median_seconds(fn, setup)
            out[op].append(point({"tokens": n}, seconds, 0.0, float(n * bytes_of[op])))
    return out


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object) -> torch.Tensor:
    """SDPA with grouped K/V heads (``enable_gqa``; K/V expanded on a torch without it)."""
    try:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)  # type: ignore[arg-type]
    except TypeError:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, **kw)  # type: ignore[arg-type]


def prefill_runs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, setup: Setup
) -> dict[str, Callable[[], object]]:
    """Causal attention of a chunk over its context and itself (lower-right aligned)."""
    chunk, keys = q.shape[2], k.shape[2]
    if chunk == keys:
        mask: dict[str, object] = {"is_causal": True}
    else:
        from torch.nn.attention.bias import causal_lower_right

        mask = {"attn_mask": causal_lower_right(chunk, keys)}
    runs: dict[str, Callable[[], object]] = {"attention_prefill": lambda: sdpa(q, k, v, **mask)}
    if setup.device.type == "cuda" and torch.backends.cuda.flash_sdp_enabled():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def flash() -> object:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return sdpa(q, k, v, **mask)

        runs["attention_prefill_flash"] = flash
    return runs


def time_prefill(m: ModelProfile, tp: int, setup: Setup) -> dict[str, list[dict[str, object]]]:
    """Prefill attention per (chunk, context): the work ``fit_operators.read_attention`` charges."""
    heads, kv_heads, d = m.num_heads // tp, max(1, m.num_kv_heads // tp), m.head_dim
    kw = {"device": setup.device, "dtype": setup.dtype}
    out: dict[str, list[dict[str, object]]] = {}
    for chunk, ctx in setup.prefill:
        q = torch.randn(1, heads, chunk, d, **kw)  # type: ignore[arg-type]
        k, v = (torch.randn(1, kv_heads, ctx + chunk, d, **kw) for _ in range(2))  # type: ignore[arg-type]
        pairs = chunk * ctx + chunk * (chunk + 1) / 2
        nbytes = (ctx + chunk) * 2 * kv_heads * d * BYTES + 2 * chunk * heads * d * BYTES
        for op, fn in prefill_runs(q, k, v, setup).items():
            try:
                seconds = median_seconds(fn, setup)
            except RuntimeError as error:  # the flash backend refusing a shape or dtype
                print(f"  {op} chunk={chunk} context={ctx}: {error}".splitlines()[0])
                continue
            size = {"chunk": chunk, "context": ctx}
            out.setdefault(op, []).append(point(size, seconds, 4.0 * heads * d * pairs, nbytes))
    return out


def paged_pool(
    batch: int, length: int, kv_heads: int, d: int, setup: Setup
) -> tuple[torch.Tensor, torch.Tensor]:
    """A pool of KV blocks (K and V stacked) twice the size needed, and a random block table."""
    blocks = batch * math.ceil(length / BLOCK_SIZE)
    kw = {"device": setup.device, "dtype": setup.dtype}
    pool = torch.randn(2 * blocks, 2, BLOCK_SIZE, kv_heads, d, **kw)  # type: ignore[arg-type]
    table = torch.randperm(2 * blocks, device=setup.device)[:blocks].view(batch, -1)
    return pool, table


def gather(pool: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """The blocks of each sequence copied into contiguous (2, batch, heads, length, d) K/V."""
    batch = table.shape[0]
    kv = pool.index_select(0, table.flatten())  # (batch * blocks, 2, block, heads, d)
    kv = kv.view(batch, -1, 2, BLOCK_SIZE, *pool.shape[3:]).permute(2, 0, 4, 1, 3, 5)
    return kv.reshape(2, batch, pool.shape[3], -1, pool.shape[4])[:, :, :, :length]


def decode_runs(
    batch: int, length: int, m: ModelProfile, tp: int, setup: Setup
) -> dict[str, Callable[[], object]]:
    """Decode attention on contiguous K/V, through the paged gather, and the gather alone."""
    heads, kv_heads, d = m.num_heads // tp, max(1, m.num_kv_heads // tp), m.head_dim
    pool, table = paged_pool(batch, length, kv_heads, d, setup)
    q = torch.randn(batch, heads, 1, d, device=setup.device, dtype=setup.dtype)
    k, v = gather(pool, table, length).contiguous()
    return {
        "attention_decode": lambda: sdpa(q, k, v),
        "attention_decode_paged": lambda: sdpa(q, *gather(pool, table, length)),
        "kv_gather": lambda: gather(pool, table, length).contiguous(),
    }


def time_decode(m: ModelProfile, tp: int, setup: Setup) -> dict[str, list[dict[str, object]]]:
    """Decode attention per (batch, KV length): the work ``read_attention`` charges."""
    heads, kv_heads, d = m.num_heads // tp, max(1, m.num_kv_heads // tp), m.head_dim
    out: dict[str, list[dict[str, object]]] = {}
    for batch, length in setup.decode:
        kv_bytes = batch * length * 2 * kv_heads * d * BYTES
        size = {"batch": batch, "kv_length": length}
        for op, fn in decode_runs(batch, length, m, tp, setup).items():
            seconds = median_seconds(fn, setup)
            flops = 0.0 if op == "kv_gather" else 4.0 * heads * d * batch * length
            nbytes = 2 * kv_bytes if op == "kv_gather" else kv_bytes  # the gather reads and writes
            out.setdefault(op, []).append(point(size, seconds, flops, float(nbytes)))
    return out


def tiny_model(m: ModelProfile) -> ModelProfile:
    """A small model of the same kind (GQA, gated MLP) so that a CPU run takes seconds."""
    group = max(1, m.num_heads // max(1, m.num_kv_heads))
    return dataclasses.replace(
        m, hidden_size=256, num_heads=4 * min(group, 2), num_kv_heads=4, head_dim=32,
        intermediate_size=512, vocab_size=1024,
    )  # fmt: skip


def make_setup(device: str, tiny: bool) -> Setup:
    on_gpu = device == "cuda"
    return Setup(
        device=torch.device(device),
        dtype=torch.bfloat16 if on_gpu else torch.float32,
        warmup=5 if on_gpu else 1,
        repeats=20 if on_gpu else 3,
        tokens=TINY_TOKENS if tiny else TOKENS,
        prefill=TINY_PREFILL if tiny else PREFILL,
        decode=TINY_DECODE if tiny else DECODE,
    )


def device_name(setup: Setup) -> str:
    if setup.device.type == "cuda":
        return torch.cuda.get_device_name(setup.device)
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def predict(fit: dict[str, object], op: str, points: list[dict[str, object]], gpu: str) -> object:
    """The fitted curve's seconds for each point, or None where the fit has no such operator."""
    klass, fit_op = FIT_OF.get(op, ("", ""))
    params = fit.get(klass, {}).get("params", {}).get(fit_op)  # type: ignore[attr-defined]
    if params is None:
        return None
    g = get_gpu(gpu)
    f, b = (np.asarray([p[key] for p in points], dtype=float) for key in ("flops", "bytes"))
    # the curve's size: tokens for GEMMs and elementwise, the chunk for prefill, the batch
    m = np.asarray([p.get("tokens", p.get("chunk", p.get("batch"))) for p in points], dtype=float)
    x = np.asarray(list(params.values()), dtype=float)
    return CLASSES[klass].predict(x, f, b, m, g.tflops * 1e12, g.mem_bw_gbs * 1e9)


def compare(profile: dict[str, object], fits_path: Path, gpu: str) -> list[dict[str, object]]:
    """Per operator: measured against the fitted curve of ``gpu``, point by point."""
    document = json.loads(fits_path.read_text())
    borrow_missing(document["gpus"])  # the curves the simulator uses where a GPU has no rows
    by_gpu = {g["gpu"]: g["classes"] for g in document["gpus"]}
    fitted = SAME_AS.get(gpu, gpu)  # H200: H100-SXM's curves at its own peaks
    if fitted not in by_gpu:
        raise SystemExit(f"{fits_path} has no fit for {gpu!r}; it has {sorted(by_gpu)}")
    rows = []
    for op, points in profile["operators"].items():  # type: ignore[attr-defined]
        predicted = predict(by_gpu[fitted], op, points, gpu)
        row: dict[str, object] = {"operator": op, "points": len(points), "fit": FIT_OF.get(op)}
        if predicted is not None:
            ratio = np.asarray(predicted) / np.asarray([p["seconds"] for p in points])
            row["predicted_over_measured_median"] = float(f"{np.median(ratio):.3g}")
            row["abs_error_median_pct"] = round(float(np.median(np.abs(ratio - 1))) * 100, 1)
            row["abs_error_max_pct"] = round(float(np.max(np.abs(ratio - 1))) * 100, 1)
            for p, t in zip(points, np.asarray(predicted), strict=True):
                p["fit_seconds"] = float(t)
        rows.append(row)
    return rows


def table(rows: list[dict[str, object]], gpu: str) -> str:
    """The comparison as fixed-width text: one line per operator."""
    lines = [
        f"measured vs fit-operators.json's curve for {gpu} (ratio = predicted / measured)",
        f"{'operator':<24} {'n':>3}  {'fit':<34} {'ratio med':>9} {'err med %':>9} {'max %':>7}",
    ]
    for row in rows:
        fit = "/".join(row["fit"]) if row["fit"] else "-"  # type: ignore[arg-type]
        if "predicted_over_measured_median" not in row:
            fit += " (no fit)"
            lines.append(f"{row['operator']:<24} {row['points']:>3}  {fit:<34}")
            continue
        lines.append(
            f"{row['operator']:<24} {row['points']:>3}  {fit:<34} "
            f"{row['predicted_over_measured_median']:>9} {row['abs_error_median_pct']:>9} "
            f"{row['abs_error_max_pct']:>7}"
        )
    return "\n".join(lines) + "\n"


def measure(model: ModelProfile, tp: int, setup: Setup) -> dict[str, list[dict[str, object]]]:
    """Every operator's points, printing each group's time as it goes."""
    operators: dict[str, list[dict[str, object]]] = {}
    for name, step in (
        ("gemms", time_gemms),
        ("elementwise", time_elementwise),
        ("prefill", time_prefill),
        ("decode", time_decode),
    ):
        begin = time.perf_counter()
        with torch.inference_mode():
            operators.update(step(model, tp, setup))
        print(f"  {name}: {time.perf_counter() - begin:.1f} s", flush=True)
    return operators


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="Llama-3-8B", help="a schedkit model profile")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (one shard)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="small shapes, few repeats (CPU)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON profile to write")
    parser.add_argument("--compare", type=Path, default=None, help="fit-operators.json")
    parser.add_argument("--gpu", default="H100-SXM", help="the fit to compare with")
    args = parser.parse_args()
    begin = time.perf_counter()
    setup = make_setup(args.device, args.tiny)
    model = get_model(args.model)
    shaped = tiny_model(model) if args.tiny else model
    torch.manual_seed(0)
    if args.tiny:
        torch.set_num_threads(1)  # a thread pool's wake-ups dominate tiny CPU kernels
    print(f"{args.model} tp={args.tp} on {device_name(setup)}, torch {torch.__version__}")
    profile: dict[str, object] = {
        "device": device_name(setup),
        "torch": torch.__version__,
        "model": args.model,
        "tp": args.tp,
        "dtype": str(setup.dtype).removeprefix("torch."),
        "tiny": args.tiny,
        "shape": {k: v for k, v in dataclasses.asdict(shaped).items() if isinstance(v, int)},
        "timing": f"median of {setup.repeats} after {setup.warmup} warm-up calls",
        "bytes_per_element_in_work": BYTES,
        "operators": measure(shaped, args.tp, setup),
    }
    if args.compare is not None:
        rows = compare(profile, args.compare, args.gpu)
        profile["comparison"] = {"fits": str(args.compare), "gpu": args.gpu, "operators": rows}
        text = table(rows, args.gpu)
        print(text, end="")
        Path(f"{args.out}.compare.txt").write_text(text)
    profile["elapsed_s"] = round(time.perf_counter() - begin, 1)
    args.out.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"wrote {args.out}; elapsed {profile['elapsed_s']} s")


if __name__ == "__main__":
    main()
