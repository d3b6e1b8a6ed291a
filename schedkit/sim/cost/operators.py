"""Step time as the sum of a layer's operators, each on a curve fitted to measured kernels.

The roofline (:mod:`schedkit.sim.cost.model`) charges a step max(FLOPs at 70% of peak,
bytes at 85% of bandwidth) plus 0.5 ms. Measured kernels are slower where the work is small
(a GEMM of a few tokens runs far below peak, a norm at 40% of bandwidth) and a step is a
chain of kernels, each with a launch cost, not one roofline. This model sums, per layer
and per tensor-parallel shard, the time of each operator:

- the four GEMMs (QKV, output, gated-MLP up and down), each ``t0 + smoothmax_k(F / (P *
  ec(M)), B / (W * em))`` with a compute efficiency ``ec(M) = emax * M / (M + m_half)``
  rising with the tokens M;
- the memory-bound operators (two RMS norms, RoPE, SiLU-and-mul, the residual add, writing
  the new tokens' K/V into the cache), each ``t0 + B / (W * e)``;
- attention: prefill ``t0 + F / (P * emax * c / (c + c_half))`` over the prefill's
  query-key pairs (c the prefill tokens), decode ``t0 + B / (W * emax * n / (n + n_half))``
  over the K/V bytes read (n the decoding requests);
- with ``tp > 1``, two all-reduces of the layer's activations, ``t0 + bytes / bandwidth``;

then, once per step, the LM head (a GEMM over the sampled rows, on ``mlp_up_proj``'s
curve) and sampling (memory-bound over the logits, on ``mlp_act``'s curve). The engine's
CPU work per step, ``c0 + c1 x requests``, overlaps the GPU's with async scheduling
(the step takes the longer of the two; vLLM's default on GPUs in 0.32-0.34) and adds to
it without (``async_scheduling=False``: ``--no-async-scheduling``, vLLM V0). The curves'
numbers are fitted per GPU by ``benchmarks/fidelity/fit_operators.py`` and stored, with
their sources, in ``schedkit/data/operator-fits.json``.

Known limits: a step's sampled rows are its decode requests plus one (``step_time`` does
not say how many prompts a step prefills, so the LM head and the per-request CPU work
undercount a step that admits many); sampling is charged over the shard's share of the
vocabulary; the CPU curve includes the sampler's own timing (Vidur's ``sampler_e2e``,
which syncs on the GPU), so without async scheduling the LM head and sampling are counted
twice, 0.3-0.9 ms a step (``benchmarks/fidelity/costmodel.md``).

The curves are written once, for floats and numpy arrays alike, so the fit and the
simulator evaluate the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedkit.errors import SchedkitError
from schedkit.sim.cost.model import (
    _check_run,
    _check_step,
    _steps_before,
    _sum_linear,
    _sum_max_of_lines,
)
from schedkit.sim.cost.profiles import GPUProfile, ModelProfile, check_tp

X = TypeVar("X", float, "np.ndarray[Any, Any]")  # a float, or the fit's numpy arrays

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = (
    "input_layernorm",
    "post_attention_layernorm",
    "attn_rope",
    "mlp_act",
    "add",
    "kv_cache_save",
)
LOGIT_BYTES = 4 * 3  # fp32 logits written, then read twice (softmax, then the sampler)
FITS_FILE = "operator-fits.json"


def gemm_time(p: Sequence[float], flops: X, nbytes: X, tokens: X, peak: float, bw: float) -> X:
    """``t0 + smoothmax_k(F / (P * emax * M / (M + m_half)), B / (W * em))``;
    ``p`` = (t0_s, compute_eff_max, compute_half_size, bandwidth_eff, smoothmax_k)."""
    t0, emax, m_half, em, k = p
    compute = flops / (peak * emax * tokens / (tokens + m_half))
    memory = nbytes / (bw * em)
    return t0 + (compute**k + memory**k) ** (1.0 / k)  # type: ignore[no-any-return]


def bandwidth_time(p: Sequence[float], nbytes: X, bw: float) -> X:
    """``t0 + B / (W * e)``; ``p`` = (t0_s, bandwidth_eff)."""
    t0, e = p
    return t0 + nbytes / (bw * e)


def prefill_attention_time(p: Sequence[float], flops: X, chunk: X, peak: float) -> X:
    """``t0 + F / (P * emax * c / (c + c_half))``; ``p`` = (t0_s, compute_eff_max,
    compute_half_size)."""
    t0, emax, c_half = p
    return t0 + flops * (chunk + c_half) / (peak * emax * chunk)


def decode_attention_time(p: Sequence[float], nbytes: X, batch: X, bw: float) -> X:
    """``t0 + B / (W * emax * n / (n + n_half))``; ``p`` = (t0_s, bandwidth_eff_max,
    batch_half_size)."""
    t0, emax, n_half = p
    return t0 + nbytes * (batch + n_half) / (bw * emax * batch)


class _Curve(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def params(self) -> tuple[float, ...]:
        """The curve's numbers in field order, as its time function takes them."""
        return tuple(getattr(self, name) for name in type(self).model_fields)


class GemmCurve(_Curve):
    t0_s: float = Field(ge=0, allow_inf_nan=False)
    compute_eff_max: float = Field(gt=0, le=1)
    compute_half_size: float = Field(ge=0, allow_inf_nan=False)
    bandwidth_eff: float = Field(gt=0, le=1)
    smoothmax_k: float = Field(ge=1, allow_inf_nan=False)


class BandwidthCurve(_Curve):
    t0_s: float = Field(ge=0, allow_inf_nan=False)
    bandwidth_eff: float = Field(gt=0, le=1)


class PrefillCurve(_Curve):
    t0_s: float = Field(ge=0, allow_inf_nan=False)
    compute_eff_max: float = Field(gt=0, le=1)
    compute_half_size: float = Field(ge=0, allow_inf_nan=False)


class DecodeCurve(_Curve):
    t0_s: float = Field(ge=0, allow_inf_nan=False)
    bandwidth_eff_max: float = Field(gt=0, le=1)
    batch_half_size: float = Field(ge=0, allow_inf_nan=False)


class AllReduceCurve(_Curve):
    t0_s: float = Field(ge=0, allow_inf_nan=False)
    gbs: float = Field(gt=0, allow_inf_nan=False)  # bytes of the tensor reduced per second


class OperatorFits(BaseModel):
    """One GPU's fitted curves, and where their numbers come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    gemm: dict[str, GemmCurve]
    elementwise: dict[str, BandwidthCurve]
    attention_prefill: PrefillCurve
    attention_decode: DecodeCurve
    all_reduce: dict[int, AllReduceCurve]  # by tensor-parallel degree
    step_overhead_s: float = Field(ge=0, allow_inf_nan=False)
    step_overhead_per_request_s: float = Field(ge=0, allow_inf_nan=False)
    overhead_source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _complete(self) -> OperatorFits:
        missing = [op for op in GEMMS if op not in self.gemm]
        missing += [op for op in ELEMENTWISE if op not in self.elementwise]
        if missing:
            raise ValueError(f"no curve for {', '.join(missing)}")
        if not self.all_reduce or min(self.all_reduce) < 2:
            raise ValueError("all_reduce needs a curve for each of 2 or more GPUs, and only those")
        return self

    def all_reduce_curve(self, tp: int) -> AllReduceCurve:
        """The curve measured at ``tp`` GPUs, else at the nearest degree above, else below."""
        degrees = sorted(self.all_reduce)
        above = [d for d in degrees if d >= tp]
        return self.all_reduce[above[0] if above else degrees[-1]]


class _FitsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    about: str
    gpus: dict[str, OperatorFits]
    same_as: dict[str, str] = Field(default_factory=dict)  # GPU -> GPU whose fits it uses


@cache
def _builtin_fits() -> _FitsFile:
    text = resources.files("schedkit").joinpath("data", FITS_FILE).read_text()
    try:
        return _FitsFile.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:  # a broken install, not user input
        raise SchedkitError(f"schedkit's {FITS_FILE} is unreadable ({exc}); reinstall") from exc


def fits_for(gpu: GPUProfile) -> tuple[OperatorFits, str] | None:
    """The built-in fits for ``gpu`` (by profile name) and the GPU they were measured on;
    None for a GPU with none (a user's profile), which the roofline then times."""
    data = _builtin_fits()
    measured = data.same_as.get(gpu.name, gpu.name)
    fits = data.gpus.get(measured)
    return (fits, measured) if fits is not None else None


def supports(model: ModelProfile) -> bool:
    """Whether the operator curves describe ``model``: a dense model with GQA attention
    (MoE layers and MLA attention have operators the fits never measured)."""
    return not model.num_experts and not model.kv_lora_rank


@dataclass(frozen=True)
class _Shapes:
    gemm: tuple[tuple[int, int], ...]  # (K, N) of each GEMM on one shard, in GEMMS order
    elementwise_bytes: tuple[int, ...]  # per token, in ELEMENTWISE order
    weight_bytes_per_element: float
    flops_per_pair: float  # per layer and shard
    kv_bytes_per_token: float  # per layer and shard
    activation_bytes_per_token: int  # one all-reduce's
    lm_head: tuple[int, int]
    vocab: int


def shard_shapes(model: ModelProfile, tp: int) -> _Shapes:
    """A layer's work on one of ``tp`` shards (each KV head on ``tp / num_kv_heads`` GPUs
    when ``tp`` exceeds the KV heads)."""
    h, hd, b = model.hidden_size, model.head_dim, model.dtype_bytes
    q = model.num_heads * hd // tp
    kv_heads = max(1, model.num_kv_heads // tp)
    kv = kv_heads * hd
    kv_b = model.kv_dtype_bytes or b
    up = 2 if model.mlp_gated else 1  # gate and up in one GEMM, or up alone (OPT's fc1)
    return _Shapes(
        gemm=(
            (h, q + 2 * kv),
            (q, h),
            (h, up * model.intermediate_size // tp),
            (model.intermediate_size // tp, h),
        ),
        elementwise_bytes=(
            2 * h * b,
            2 * h * b,
            2 * (q + kv) * b,
            (up + 1) * model.intermediate_size // tp * b,  # the activation reads up, writes one
            3 * h * b,
            2 * kv * kv_b,
        ),
        weight_bytes_per_element=(model.weight_bits / 8) if model.weight_bits else b,
        flops_per_pair=4.0 * q,
        kv_bytes_per_token=2.0 * kv * kv_b,
        activation_bytes_per_token=h * b,
        lm_head=(h, model.vocab_size // tp),
        vocab=model.vocab_size // tp,
    )


class OperatorCostModel:
    """A step's time from the fitted per-operator curves; see the module docstring."""

    def __init__(
        self,
        model: ModelProfile,
        gpu: GPUProfile,
        tp: int = 1,
        fits: OperatorFits | None = None,
        *,
        async_scheduling: bool = True,
    ) -> None:
        check_tp(model, tp)
        if not supports(model):
            raise SchedkitError(
                f"{model.name} has MoE or MLA layers, which the operator fits do not cover;"
                " its steps are timed by the roofline"
            )
        found = fits_for(gpu) if fits is None else (fits, gpu.name)
        if found is None:
            raise SchedkitError(f"no operator fits for GPU {gpu.name!r}")
        self.model, self.gpu, self.tp = model, gpu, tp
        self.fits, self.measured_on = found
        self.async_scheduling = async_scheduling
        self._peak = gpu.tflops * 1e12
        self._bw = gpu.mem_bw_gbs * 1e9
        self._shapes = shard_shapes(model, tp)
        self._layers = model.num_layers
        self._gemm = [self.fits.gemm[op].params() for op in GEMMS]
        self._elem = [self.fits.elementwise[op].params() for op in ELEMENTWISE]
        self._lm = self.fits.gemm["mlp_up_proj"].params()
        self._sample = self.fits.elementwise["mlp_act"].params()
        self._prefill = self.fits.attention_prefill.params()
        t0_d, emax_d, n_half = self.fits.attention_decode.params()
        self._t0_decode, self._decode_bw, self._n_half = t0_d, self._bw * emax_d, n_half
        self._reduce = self.fits.all_reduce_curve(tp) if tp > 1 else None
        self._t0_prefill = self._prefill[0]
        # Each step's size is looked up once; a dict (not lru_cache) pickles, for Ray.
        self._by_tokens: dict[int, float] = {}
        self._by_rows: dict[int, float] = {}

    def _gemm_seconds(self, p: tuple[float, ...], k: int, n: int, tokens: int) -> float:
        weights = k * n * self._shapes.weight_bytes_per_element
        nbytes = weights + tokens * (k + n) * self.model.dtype_bytes
        return gemm_time(p, 2.0 * tokens * k * n, nbytes, tokens, self._peak, self._bw)

    def _tokens_time(self, tokens: int) -> float:
        """What every layer spends on ``tokens`` tokens outside attention: the GEMMs, the
        memory-bound operators, the all-reduces."""
        s = self._shapes
        layer = sum(
            self._gemm_seconds(p, k, n, tokens)
            for p, (k, n) in zip(self._gemm, s.gemm, strict=True)
        )
        layer += sum(
            bandwidth_time(p, tokens * b, self._bw)
            for p, b in zip(self._elem, s.elementwise_bytes, strict=True)
        )
        reduces = 0.0
        if self._reduce is not None:
            one = self._reduce.t0_s + tokens * s.activation_bytes_per_token / (
                self._reduce.gbs * 1e9
            )
            reduces = (2 * self._layers + 1) * one  # two a layer, one after the embedding
        return self._layers * layer + reduces

    def _rows_time(self, rows: int) -> float:
        """What a step's GPU spends once on its ``rows`` sampled rows: the LM head and
        sampling."""
        k, n = self._shapes.lm_head
        head = self._gemm_seconds(self._lm, k, n, rows)
        logits = rows * self._shapes.vocab * LOGIT_BYTES
        sampling = bandwidth_time(self._sample, logits, self._bw)
        return head + sampling

    def cpu_seconds(self, rows: int) -> float:
        """The engine's CPU work for a step of ``rows`` requests: ``c0 + c1 x rows``."""
        return self.fits.step_overhead_s + self.fits.step_overhead_per_request_s * rows

    def _fixed(self, tokens: int, rows: int, prefill: bool) -> float:
        """The GPU's time but for attention's per-pair and per-KV-byte terms, its kernels'
        fixed costs included (each part cached by the one size it depends on)."""
        attention = self._t0_prefill if prefill else 0.0
        if rows > prefill:  # decoding requests in the step
            attention += self._t0_decode
        by_tokens = self._by_tokens.get(tokens)
        if by_tokens is None:
            by_tokens = self._by_tokens[tokens] = self._tokens_time(tokens)
        by_rows = self._by_rows.get(rows)
        if by_rows is None:
            by_rows = self._by_rows[rows] = self._rows_time(rows)
        return by_tokens + by_rows + self._layers * attention

    def _kv_seconds_per_token(self, decode_tokens: int) -> float:
        """Seconds every layer spends reading one token of K/V with ``decode_tokens``
        decoding requests in the step."""
        n = max(decode_tokens, 1)
        efficiency_scale = (n + self._n_half) / n
        return self._layers * self._shapes.kv_bytes_per_token * efficiency_scale / self._decode_bw

    def _prefill_seconds(self, prefill_tokens: int, kv_tokens: int, attn_pairs: int) -> float:
        """Prefill attention's compute over ``attn_pairs - kv_tokens + prefill_tokens``
        pairs: the decode tokens' pairs cancel (each adds its context to both), and of a
        chunk of n after c cached tokens this counts n*c + n*(n+1)/2 - c, short by c (its
        reading of the c cached tokens is charged with the KV read instead)."""
        if not prefill_tokens:
            return 0.0
        pairs = max(attn_pairs - kv_tokens, 0) + prefill_tokens
        _, emax, c_half = self._prefill
        flops = self._shapes.flops_per_pair * pairs
        return (
            self._layers * flops * (prefill_tokens + c_half) / (self._peak * emax * prefill_tokens)
        )

    def step_time(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> float:
        _check_step(prefill_tokens, decode_tokens, kv_tokens, attn_pairs)
        tokens = prefill_tokens + decode_tokens
        if tokens == 0:
            return 0.0
        rows = decode_tokens + (1 if prefill_tokens else 0)
        gpu = (
            self._fixed(tokens, rows, prefill_tokens > 0)
            + self._prefill_seconds(prefill_tokens, kv_tokens, attn_pairs)
            + self._kv_seconds_per_token(decode_tokens) * kv_tokens
        )
        cpu = self.cpu_seconds(rows)
        return max(gpu, cpu) if self.async_scheduling else gpu + cpu

    def _decode_run(self, n: int, kv0: int) -> Callable[[int], float]:
        """The time of a run's first k steps as a function of k (``n`` > 0)."""
        per_kv = self._kv_seconds_per_token(n)
        gpu0, slope, cpu = self._fixed(n, n, False) + per_kv * kv0, per_kv * n, self.cpu_seconds(n)
        if self.async_scheduling:  # the GPU's time grows step by step; the CPU's does not
            return lambda k: _sum_max_of_lines(gpu0, slope, cpu, 0.0, k)
        return lambda k: _sum_linear(gpu0 + cpu, slope, 0, k)

    def decode_run_time(self, n: int, kv0: int, k: int) -> float:
        _check_run(n, kv0, k)
        return self._decode_run(n, kv0)(k) if n and k else 0.0

    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int:
        _check_run(n, kv0, max(k_max, 0))
        run = self._decode_run(n, kv0) if n else (lambda k: 0.0)
        return _steps_before(run, budget_s, k_max)

    def _extrapolated(self) -> dict[str, str]:
        """A note when ``tp`` is beyond every GPU count the all-reduce was measured at
        (one node, NVLink): its curve is the largest's, which a multi-node TP exceeds."""
        measured = max(self.fits.all_reduce)
        if self.tp <= measured:
            return {}
        return {
            "all_reduce": f"measured up to {measured} GPUs in one node; tp={self.tp} uses that"
            " curve (not measured: across nodes it is slower)"
        }

    def describe(self) -> dict[str, Any]:
        same = "" if self.measured_on == self.gpu.name else f" at {self.gpu.name}'s peaks"
        return {
            "kind": "operators",
            "model": self.model.label,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "fits": f"{self.measured_on}{same}: {self.fits.source}",
            "step_overhead": self.fits.overhead_source,
            "cpu_overlaps_gpu": self.async_scheduling,
            **self._extrapolated(),
        }
