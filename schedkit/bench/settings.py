"""The engine settings a bench runs with: :class:`EngineSpec`, every setting with its one
default, and :class:`EngineSettings`, the ones an arm sets itself (unset: the bench's).

The names are the bench's flags (``max_num_seqs`` is ``--max-num-seqs``), so vLLM's where it
has one. Each setting's constraint is written once, as a type below that both classes use;
the defaults shared with the simulator's config are the simulator's
(:class:`schedkit.sim.config.SimConfig`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le
from pydantic import BaseModel, ConfigDict, Field

from schedkit.sim.config import SimConfig

__all__ = ["ENGINE_KEYS", "EngineSettings", "EngineSpec", "KvCacheDtype"]

KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
TensorParallel = Annotated[int, Ge(1)]
Replicas = Annotated[int, Ge(1), Le(1024)]
PoolSize = Annotated[int, Ge(0), Le(1024)]
# Prefill and decode instances on different nodes, one 400 Gb/s NIC a GPU (DGX H100).
DEFAULT_KV_LINK = "ib-ndr"
Positive = Annotated[int, Gt(0)]
NonNegative = Annotated[int, Ge(0)]
Share = Annotated[float, Gt(0), Le(1)]
Fraction = Annotated[float, Ge(0), Le(1)]
GiB = Annotated[float, Ge(0)]
Rate = Annotated[float, Gt(0)]
Millis = Annotated[float, Ge(0)]
# The host link's defaults: half of PCIe 5.0 x16's 64 GB/s a direction (PCI-SIG's figure)
# for what KV loads get of it, and 0.1 ms to start and sync a load: assumptions, to be
# replaced by a measurement (--kv-offloading-bandwidth, --kv-offloading-latency-ms).
HOST_LINK_GBS = 32.0
HOST_LOAD_LATENCY_MS = 0.1

_SIM = SimConfig.model_fields


def _sim_default(name: str) -> Any:
    return _SIM[name].default


class EngineSpec(BaseModel):
    """The engine settings of a bench (``BenchSpec.settings``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(
        default="Llama-3-8B",
        description="Model profile, or a local Hugging Face model folder or its config.json.",
    )
    gpu: str = Field(default="H100-SXM", description="GPU profile.")
    tp: TensorParallel = Field(default=1, description="vLLM --tensor-parallel-size.")
    replicas: Replicas = Field(
        default=1,
        description="Simulated engines behind a router (route_request; round-robin by default).",
    )
    profile: str | None = Field(
        default=None,
        description="GPU/model profile file, or a cost profile from `schedkit calibrate`.",
    )
    max_num_seqs: Positive = Field(
        default=_sim_default("max_num_seqs"), description="vLLM --max-num-seqs."
    )
    max_num_batched_tokens: Positive = Field(
        default=_sim_default("max_num_batched_tokens"),
        description="vLLM --max-num-batched-tokens.",
    )
    gpu_memory_utilization: Share = Field(default=0.9, description="vLLM --gpu-memory-utilization.")
    block_size: Positive = Field(
        default=_sim_default("block_size"), description="vLLM --block-size."
    )
    prefix_caching: bool = Field(
        default=_sim_default("enable_prefix_caching"),
        description="vLLM --no-enable-prefix-caching.",
    )
    kv_blocks: Positive | None = Field(
        default=None, description="vLLM --num-gpu-blocks-override: the KV capacity in blocks."
    )
    long_prefill_token_threshold: NonNegative = Field(
        default=_sim_default("long_prefill_token_threshold"),
        description="vLLM --long-prefill-token-threshold (0: no cap).",
    )
    prefill_schedule_interval: Positive = Field(
        default=_sim_default("prefill_schedule_interval"),
        description="vLLM --prefill-schedule-interval (0.33+): admit prefill only every N"
        " steps, decoding alone between (1: every step).",
    )
    cache_aware_admission_window: NonNegative = Field(
        default=_sim_default("cache_aware_admission_window"),
        description="vLLM --cache-aware-admission-window (0.34): within the first N waiting"
        " requests, admit those with a cached prefix first (0: off; needs prefix caching).",
    )
    cache_aware_admission_threshold: Fraction = Field(
        default=_sim_default("cache_aware_admission_threshold"),
        description="vLLM --cache-aware-admission-threshold (0.34): the KV cache usage below"
        " which the window is not applied.",
    )
    kv_offloading_size: GiB = Field(
        default=0.0,
        description="vLLM --kv-offloading-size (0.34): GiB of host memory, summed over TP"
        " ranks, for a KV tier behind the prefix cache; a prefix found there is loaded,"
        " not recomputed (0: no tier).",
    )
    kv_offloading_bandwidth: Rate = Field(
        default=HOST_LINK_GBS,
        description="Simulator: GB/s each GPU's KV loads from host memory get (default: half"
        " of PCIe 5.0 x16's 64 GB/s a direction).",
    )
    kv_offloading_latency_ms: Millis = Field(
        default=HOST_LOAD_LATENCY_MS,
        description="Simulator: ms a KV load from host memory takes on top of its transfer.",
    )
    eviction_window: NonNegative | None = Field(
        default=None,
        description="Simulator: at most this many LRU blocks offered to an eviction policy"
        f" (0 = all; default {_sim_default('eviction_window')}).",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto",
        description="vLLM --kv-cache-dtype: auto (the model's), bfloat16, float16, fp8,"
        " fp8_e4m3, fp8_e5m2; fp8 holds twice the tokens in the same memory.",
    )
    async_scheduling: bool = Field(
        default=True,
        description="vLLM --[no-]async-scheduling: the engine's CPU work for a step runs while"
        " the GPU computes (the step takes the longer of the two; vLLM's default on GPUs) or"
        " before it (their sum). Times steps in the simulator's per-operator GPU model only.",
    )
    prefill_replicas: PoolSize = Field(
        default=0,
        description="Simulator: prefill instances of a disaggregated deployment (with"
        " --decode-replicas; 0: aggregated serving).",
    )
    decode_replicas: PoolSize = Field(
        default=0, description="Simulator: decode instances of a disaggregated deployment."
    )
    prefill_tp: TensorParallel | None = Field(
        default=None, description="Simulator: each prefill instance's TP (default: --tp)."
    )
    decode_tp: TensorParallel | None = Field(
        default=None, description="Simulator: each decode instance's TP (default: --tp)."
    )
    prefill_gpu: str | None = Field(
        default=None, description="Simulator: the prefill instances' GPU (default: --gpu)."
    )
    decode_gpu: str | None = Field(
        default=None, description="Simulator: the decode instances' GPU (default: --gpu)."
    )
    kv_link: str = Field(
        default=DEFAULT_KV_LINK,
        description="Simulator: the link KV goes over from prefill to decode: nvlink3,"
        " nvlink4, nvlink5, ib-hdr, ib-ndr, roce-200, roce-400, pcie4, pcie5,"
        " mooncake-roce (measured), or GBS[:MS] per GPU.",
    )
    # the simulator's batches, for the whole bench (no arm sets it): None or True mix
    # prefill chunks into decode steps (vLLM); False runs prefill-only steps ahead of
    # decode (SGLang). Real engines run their own.
    mixed_prefill: bool | None = Field(
        default=None,
        description="The simulator's batches: prefill chunks in decode steps, as vLLM (default),"
        " or prefill-only steps ahead of decode, as SGLang (--no-mixed-prefill).",
    )


class EngineSettings(BaseModel):
    """The engine settings one arm overrides (unset: the bench's): :class:`EngineSpec`'s
    but ``mixed_prefill``, with no defaults of their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    gpu: str | None = None
    tp: TensorParallel | None = None
    replicas: Replicas | None = None
    profile: str | None = None
    max_num_seqs: Positive | None = None
    max_num_batched_tokens: Positive | None = None
    gpu_memory_utilization: Share | None = None
    block_size: Positive | None = None
    prefix_caching: bool | None = None
    kv_blocks: Positive | None = None
    long_prefill_token_threshold: NonNegative | None = None
    prefill_schedule_interval: Positive | None = None
    cache_aware_admission_window: NonNegative | None = None
    cache_aware_admission_threshold: Fraction | None = None
    kv_offloading_size: GiB | None = None
    kv_offloading_bandwidth: Rate | None = None
    kv_offloading_latency_ms: Millis | None = None
    eviction_window: NonNegative | None = None
    kv_cache_dtype: KvCacheDtype | None = None
    async_scheduling: bool | None = None
    prefill_replicas: PoolSize | None = None
    decode_replicas: PoolSize | None = None
    prefill_tp: TensorParallel | None = None
    decode_tp: TensorParallel | None = None
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    kv_link: str | None = None

    def overrides(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


ENGINE_KEYS = tuple(EngineSettings.model_fields)
