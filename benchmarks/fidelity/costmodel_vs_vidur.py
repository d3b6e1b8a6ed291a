"""The roofline against measured operator times: Vidur's profiling tables (MIT licence).

Vidur profiled every linear operator of a transformer layer (QKV and output projections,
the gated MLP, norms, RoPE, residual adds) on real GPUs, per number of tokens in the
batch. Summed over the layers, that is the time a step spends outside attention and the
LM head. The script compares it with the roofline's time for the same work: the
layers' weights read once and 2 FLOPs per layer parameter per token, at the default
efficiencies (70% of peak FLOP/s, 85% of peak bandwidth), with no step overhead.

    git clone https://github.com/microsoft/vidur /tmp/vidur    # data is MIT-licensed
    python benchmarks/fidelity/costmodel_vs_vidur.py \\
        /tmp/vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv \\
        --model Llama-3-8B --gpu A100-80GB

    python benchmarks/fidelity/costmodel_vs_vidur.py \\
        /tmp/vidur/data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv \\
        --model Llama-2-7B --gpu H100-SXM --profile benchmarks/fidelity/costmodel-llama-2-7b.toml

Prints a table by batch size (tokens); no Vidur data is copied into this repository.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from schedkit.sim.cost.profiles import get_gpu, get_model, load_profile_file

OPERATORS = (
    "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
    "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
)  # fmt: skip
TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mlp_csv", type=Path)
    parser.add_argument("--model", default="Llama-3-8B")
    parser.add_argument("--gpu", default="A100-80GB")
    parser.add_argument("--compute-efficiency", type=float, default=0.7)
    parser.add_argument("--bandwidth-efficiency", type=float, default=0.85)
    parser.add_argument("--profile", type=Path, default=None, help="more model profiles (TOML)")
    args = parser.parse_args()
    if args.profile is not None:
        load_profile_file(args.profile)
    model, gpu = get_model(args.model), get_gpu(args.gpu)
    with args.mlp_csv.open() as f:
        rows = {
            int(r["num_tokens"]): r
            for r in csv.DictReader(f)
            if r["num_tensor_parallel_workers"] == "1"
        }
    h, hd = model.hidden_size, model.head_dim
    attention = h * model.num_heads * hd * 2 + 2 * h * model.num_kv_heads * hd
    layer_params = attention + 3 * h * model.intermediate_size
    flops_per_s = gpu.tflops * 1e12 * args.compute_efficiency
    bytes_per_s = gpu.mem_bw_gbs * 1e9 * args.bandwidth_efficiency
    print(f"{model.name} on {gpu.name}, tp 1: the {model.num_layers} layers' linear operators")
    print(f"{'tokens':>7} {'Vidur ms':>9} {'roofline ms':>11} {'ratio':>6}  bound")
    for n in TOKENS:
        row = rows.get(n)
        if row is None:
            continue
        measured = model.num_layers * sum(float(row[f"time_stats.{op}.median"]) for op in OPERATORS)
        compute = 2 * layer_params * n * model.num_layers / flops_per_s * 1e3
        memory = layer_params * model.num_layers * model.dtype_bytes / bytes_per_s * 1e3
        roofline = max(compute, memory)
        bound = "compute" if compute > memory else "memory"
        print(f"{n:>7} {measured:>9.3f} {roofline:>11.3f} {roofline / measured:>5.2f}x  {bound}")


if __name__ == "__main__":
    main()
