"""The simulated engine's knobs and what it needs of a cost model."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Candidates offered to select_evictions per call, at least: building a view per evictable
# block made policy eviction 5-70x slower than LRU on long-prompt traces. Blocks a policy
# keeps stay at the front, so a small window fills with them: 4,096 keeps lfu's hit rate
# on mooncake-conv at 30k blocks, 256 loses most of it (benchmarks/policies/evict.md).
DEFAULT_EVICTION_WINDOW = 4096
# ... and at least this many per block the engine needs, so a large demand still has choice.
EVICTION_WINDOW_PER_BLOCK = 4


class StepCost(Protocol):
    def step_time(
        self, prefill_tokens: int, decode_tokens: int, kv_tokens: int, attn_pairs: int
    ) -> float: ...
    def decode_run_time(self, n: int, kv0: int, k: int) -> float: ...
    def decode_steps_before(self, n: int, kv0: int, budget_s: float, k_max: int) -> int: ...


class SimConfig(BaseModel):
    """Engine knobs, with vLLM's names and V1 defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_blocks: int = Field(gt=0, description="KV cache capacity in blocks")
    block_size: int = Field(default=16, gt=0)
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    enable_prefix_caching: bool = True
    reserve_full_prompt: bool = Field(
        default=True,
        description="admit a waiting request only if its whole sequence fits in free blocks"
        " (vLLM's scheduler_reserve_full_isl, on by default since 0.32)",
    )
    hash_block_tokens: int = Field(
        default=0, ge=0, description="tokens per trace hash id (Mooncake: 512)"
    )
    mixed_prefill: bool = Field(
        default=True,
        description="prefill chunks run in the same step as decodes (vLLM); False: a step"
        " that can prefill runs prefills only, ahead of decode (SGLang's default, without"
        " --enable-mixed-chunk)",
    )
    prefill_schedule_interval: int = Field(
        default=1,
        ge=1,
        description="vLLM's (0.33+): admit prefill only every N executed steps, decoding"
        " alone between; a held step runs no prefill chunk either, unless no request is"
        " decoding or the last release left requests waiting (its capacity escape)",
    )
    cache_aware_admission_window: int = Field(
        default=0,
        ge=0,
        description="vLLM's (0.34): among the first N waiting requests not yet computed,"
        " those with more of their prompt in the prefix cache are admitted first; needs"
        " prefix caching, and a policy that orders the waiting queue turns it off",
    )
    cache_aware_admission_threshold: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="vLLM's (0.34): the KV cache usage below which the window is not applied",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="the client's limit, not the engine's: at most this many requests in"
        " the engine; a request arrives when one leaves if it is due by then, and its"
        " arrival_s becomes that time (vllm bench serve --max-concurrency)",
    )
    host_kv_blocks: int = Field(
        default=0,
        ge=0,
        description="vLLM's KV offloading (--kv-offloading-size): a host-memory tier of"
        " this many blocks behind the prefix cache, written through as blocks are computed;"
        " a prefix found there is loaded, not recomputed (0: no tier)",
    )
    host_kv_block_load_s: float = Field(
        default=0.0, ge=0.0, description="seconds one block takes on the host-to-GPU link"
    )
    host_kv_load_latency_s: float = Field(
        default=0.0, ge=0.0, description="seconds a load waits after its transfer (setup, sync)"
    )
    timeline_interval_s: float = Field(default=1.0, gt=0)
    eviction_window: int = Field(
        default=DEFAULT_EVICTION_WINDOW,
        ge=0,
        description="an eviction policy sees at most the max(eviction_window, 4 x blocks"
        " needed) least recently used evictable blocks; 0 = every evictable block",
    )

    @model_validator(mode="after")
    def _vllm_knobs_need_vllm_batches(self) -> SimConfig:
        if not self.mixed_prefill and (
            self.prefill_schedule_interval > 1 or self.cache_aware_admission_window
        ):
            raise ValueError(
                "prefill_schedule_interval and cache_aware_admission_window are vLLM's;"
                " they need vLLM's batches (mixed_prefill=True), not SGLang's"
            )
        if self.host_kv_blocks and not (self.enable_prefix_caching and self.mixed_prefill):
            raise ValueError(
                "a host KV tier (kv_offloading_size) is vLLM's: it needs prefix caching and"
                " vLLM's batches (mixed_prefill=True)"
            )
        return self
