"""How long one engine step takes: a roofline model and a linear one (fitted in calibration).

A step is described by ``prefill_tokens`` (prompt tokens computed), ``decode_tokens`` (one
per decoding request), ``kv_tokens`` (KV-cache tokens attention reads: the scheduled
requests' context lengths after this step) and ``attn_pairs`` (query-key pairs: a decode
token adds its context length, a prefill chunk of n tokens after c cached ones adds
n*c + n*(n+1)/2). ``decode_run_time`` / ``decode_steps_before`` answer questions about a
run of identical pure-decode steps in closed form, so the simulator can skip over it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from schedkit.errors import SchedkitError, quote
from schedkit.sim.cost.profiles import (
    GPUProfile,
    ModelProfile,
    check_tp,
    kv_capacity_tokens,
)

LINEAR_COEFFICIENTS = ("c0", "c_prefill", "c_decode", "c_kv", "c_attn")


class CostModel(Protocol):
    def step_time(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> float:
        """Seconds one step takes; 0 for a step with no tokens."""
        ...

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        """Sum over j < k of ``step_time(0, n, kv0 + n*j, kv0 + n*j)``."""
        ...

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        """How many of the run's first ``k_max`` steps start strictly before ``budget_s``."""
        ...


class RooflineCostModel:
    """Step time = overhead + max(compute time, memory time), split evenly over ``tp`` GPUs.

    Each step reads the weights once (a MoE model's every expert, which a batch of a few
    dozen tokens already touches) plus the KV cache it attends over; it computes 2 FLOPs
    per active parameter per token plus 4 per (query, key) pair per head dimension.
    """

    def __init__(
        self,
        model: ModelProfile,
        gpu: GPUProfile,
        tp: int = 1,
        compute_efficiency: float = 0.7,
        bandwidth_efficiency: float = 0.85,
        step_overhead_s: float = 0.0005,
    ) -> None:
        check_tp(model, tp)
        if not (0.0 < compute_efficiency <= 1.0 and 0.0 < bandwidth_efficiency <= 1.0):
            raise SchedkitError(
                "compute_efficiency and bandwidth_efficiency must be in (0, 1], got"
                f" {compute_efficiency} and {bandwidth_efficiency}"
            )
        if not (math.isfinite(step_overhead_s) and step_overhead_s >= 0.0):
            raise SchedkitError(f"step_overhead_s must be >= 0 seconds, got {step_overhead_s}")
        if min(gpu.tflops, gpu.mem_bw_gbs) <= 0:
            raise SchedkitError(f"GPU {quote(gpu.name)} needs positive tflops and mem_bw_gbs")
        self.model, self.gpu, self.tp = model, gpu, tp
        self.compute_efficiency = compute_efficiency
        self.bandwidth_efficiency = bandwidth_efficiency
        self.step_overhead_s = step_overhead_s
        self._flops_per_s = tp * gpu.tflops * 1e12 * compute_efficiency
        self._bytes_per_s = tp * gpu.mem_bw_gbs * 1e9 * bandwidth_efficiency
        self._flops_per_token = 2.0 * model.active_params
        self._flops_per_pair = 4.0 * model.num_layers * model.num_heads * model.head_dim
        self._weight_bytes = float(model.weight_bytes)
        self._kv_bytes = float(model.kv_bytes_per_token)

    def roofline_times(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> tuple[float, float]:
        """(compute seconds, memory seconds) of a step, before overhead and the max."""
        tokens = prefill_tokens + decode_tokens
        flops = self._flops_per_token * tokens + self._flops_per_pair * attn_pairs
        memory_bytes = self._weight_bytes + self._kv_bytes * kv_tokens
        return flops / self._flops_per_s, memory_bytes / self._bytes_per_s

    def step_time(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> float:
        _check_step(prefill_tokens, decode_tokens, kv_tokens, attn_pairs)
        if prefill_tokens + decode_tokens == 0:
            return 0.0
        compute, memory = self.roofline_times(prefill_tokens, decode_tokens, kv_tokens, attn_pairs)
        return self.step_overhead_s + max(compute, memory)

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        _check_run(n, kv0, k)
        if n == 0 or k == 0:
            return 0.0
        # Compute and memory time are each linear in j; their max is summed piecewise.
        fc, fm = self._flops_per_s, self._bytes_per_s
        compute_a = (self._flops_per_token * n + self._flops_per_pair * kv0) / fc
        compute_b = self._flops_per_pair * n / fc
        memory_a = (self._weight_bytes + self._kv_bytes * kv0) / fm
        memory_b = self._kv_bytes * n / fm
        return k * self.step_overhead_s + _sum_max_of_lines(
            compute_a, compute_b, memory_a, memory_b, k
        )

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        return _steps_before(lambda j: self.decode_run_time(n, kv0, j), budget_s, k_max)

    def linear_coefficients(self) -> dict[str, float]:
        """Its terms as ``LinearCostModel`` coefficients: the overhead plus reading the
        weights once per step, FLOPs per token (prefill and decode alike), KV bytes per
        token read, FLOPs per query-key pair. The step time is the max of compute and
        memory; their sum is the linear upper bound."""
        flops, bandwidth = self._flops_per_s, self._bytes_per_s
        return {
            "c0": self.step_overhead_s + self._weight_bytes / bandwidth,
            "c_prefill": self._flops_per_token / flops,
            "c_decode": self._flops_per_token / flops,
            "c_kv": self._kv_bytes / bandwidth,
            "c_attn": self._flops_per_pair / flops,
        }

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """KV-cache tokens left once weights and a 1 GB/GPU activation reserve are placed."""
        return kv_capacity_tokens(self.model, self.gpu, self.tp, gpu_memory_utilization)

    def kv_capacity_blocks(self, block_size: int = 16, gpu_memory_utilization: float = 0.9) -> int:
        if block_size < 1:
            raise SchedkitError(f"block_size must be >= 1 token, got {block_size}")
        return self.kv_capacity_tokens(gpu_memory_utilization) // block_size

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "roofline",
            "model": self.model.label,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "compute_efficiency": self.compute_efficiency,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "step_overhead_s": self.step_overhead_s,
        }


class LinearCostModel:
    """Step time = c0 + c_prefill*prefill + c_decode*decode + c_kv*kv + c_attn*pairs."""

    def __init__(
        self, c0: float, c_prefill: float, c_decode: float, c_kv: float, c_attn: float = 0.0
    ) -> None:
        values = (c0, c_prefill, c_decode, c_kv, c_attn)
        for label, value in zip(LINEAR_COEFFICIENTS, values, strict=True):
            if not (math.isfinite(value) and value >= 0.0):
                raise SchedkitError(f"{label} must be a finite number >= 0, got {value}")
        self.c0, self.c_prefill, self.c_decode, self.c_kv, self.c_attn = values

    def step_time(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> float:
        _check_step(prefill_tokens, decode_tokens, kv_tokens, attn_pairs)
        if prefill_tokens + decode_tokens == 0:
            return 0.0
        return (
            self.c0
            + self.c_prefill * prefill_tokens
            + self.c_decode * decode_tokens
            + self.c_kv * kv_tokens
            + self.c_attn * attn_pairs
        )

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        _check_run(n, kv0, k)
        if n == 0 or k == 0:
            return 0.0
        per_kv = self.c_kv + self.c_attn
        return _sum_linear(self.c0 + self.c_decode * n + per_kv * kv0, per_kv * n, 0, k)

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        return _steps_before(lambda j: self.decode_run_time(n, kv0, j), budget_s, k_max)

    def describe(self) -> dict[str, Any]:
        return {"kind": "linear", **{name: getattr(self, name) for name in LINEAR_COEFFICIENTS}}


def _check_step(prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int) -> None:
    if min(prefill_tokens, decode_tokens, kv_tokens, attn_pairs) < 0:
        raise SchedkitError(
            "step_time arguments must be >= 0, got"
            f" prefill_tokens={prefill_tokens}, decode_tokens={decode_tokens},"
            f" kv_tokens={kv_tokens}, attn_pairs={attn_pairs}"
        )


def _check_run(n: int, kv0: int, k: int) -> None:
    if min(n, kv0, k) < 0:
        raise SchedkitError(f"decode run arguments must be >= 0, got n={n}, kv0={kv0}, k={k}")


def _sum_linear(a: float, b: float, lo: int, hi: int) -> float:
    """Sum of a + b*j for lo <= j < hi."""
    count = hi - lo
    return count * a + b * (lo + hi - 1) * count / 2 if count > 0 else 0.0


def _sum_max_of_lines(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    """Sum over j < k of max(a1 + b1*j, a2 + b2*j); the max switches line at most once."""
    if b1 == b2:
        return _sum_linear(max(a1, a2), b1, 0, k)
    if b1 < b2:
        a1, b1, a2, b2 = a2, b2, a1, b1
    # Line 1 is steeper, so it is the max from j >= cross onwards.
    cross = (a2 - a1) / (b1 - b2)
    split = math.ceil(min(max(cross, 0.0), float(k)))
    return _sum_linear(a2, b2, 0, split) + _sum_linear(a1, b1, split, k)


def _steps_before(run_time: Callable[[int], float], budget_s: float, k_max: int) -> int:
    """Smallest j in [0, k_max] with run_time(j) >= budget_s, else k_max (run_time rises)."""
    if k_max < 0 or math.isnan(budget_s):
        raise SchedkitError(f"need k_max >= 0 and a budget_s number, got {k_max}, {budget_s}")
    lo, hi = 0, k_max
    if run_time(hi) < budget_s:
        return k_max
    while lo < hi:
        mid = (lo + hi) // 2
        if run_time(mid) >= budget_s:
            hi = mid
        else:
            lo = mid + 1
    return lo


def __getattr__(name: str) -> object:
    """``make_cost_model``, moved to ``schedkit.sim.cost.calibration`` (issue #36)."""
    if name == "make_cost_model":
        import importlib
        import warnings

        warnings.warn(
            "schedkit.sim.cost.model.make_cost_model moved to schedkit.sim.cost.calibration;"
            " import it from there (the old name goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("schedkit.sim.cost.calibration").make_cost_model
    raise AttributeError(f"module 'schedkit.sim.cost.model' has no attribute {name!r}")
