"""Sanity figures for the roofline cost model against back-of-envelope physics.

Run: ``python benchmarks/fidelity/physics_sanity.py [--model Llama-3-8B] [--gpu H100-SXM] [--tp 1]``
"""

from __future__ import annotations

import argparse

from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="Llama-3-8B")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--tp", type=int, default=1)
    args = parser.parse_args()
    model, gpu = get_model(args.model), get_gpu(args.gpu)
    cost = RooflineCostModel(model, gpu, tp=args.tp)
    print(f"{model.name} on {gpu.name}: {cost.describe()}")
    print(f"  params {model.num_params / 1e9:.3f} B, weights {model.weight_bytes / 1e9:.2f} GB,")
    print(f"  KV {model.kv_bytes_per_token} bytes/token")

    # Decode at batch 1: reading the weights once should dominate.
    ideal = model.weight_bytes / (args.tp * gpu.mem_bw_gbs * 1e9)
    step = cost.step_time(0, 1, 1024, 1024)
    compute, memory = cost.roofline_times(0, 1, 1024, 1024)
    print("decode step, batch 1, context 1024:")
    print(f"  weights / peak bandwidth = {ideal * 1e3:.2f} ms")
    print(f"  model step time          = {step * 1e3:.2f} ms  (ratio {step / ideal:.2f})")
    bound = "compute" if compute > memory else "memory"
    print(f"  compute {compute * 1e3:.3f} ms vs memory {memory * 1e3:.3f} ms -> {bound}-bound")

    # One 8192-token prefill from an empty cache: compute should dominate.
    n = 8192
    pairs = n * (n + 1) // 2
    compute, memory = cost.roofline_times(n, 0, n, pairs)
    bound = "compute" if compute > memory else "memory"
    print(f"prefill of {n} tokens:")
    print(f"  compute {compute * 1e3:.1f} ms vs memory {memory * 1e3:.2f} ms -> {bound}-bound")
    print(f"  step time {cost.step_time(n, 0, n, pairs) * 1e3:.1f} ms")
    print(f"  throughput {n / cost.step_time(n, 0, n, pairs):,.0f} prompt tokens/s")

    tokens = cost.kv_capacity_tokens(0.9)
    blocks = cost.kv_capacity_blocks(16, 0.9)
    print("KV capacity at gpu_memory_utilization 0.9:")
    print(f"  {tokens:,} tokens = {blocks:,} blocks of 16")


if __name__ == "__main__":
    main()
