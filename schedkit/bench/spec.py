"""What ``schedkit bench`` is asked to do (:class:`BenchSpec`), and what an engine's arm
runner (:class:`ArmRunner`, entry-point group ``schedkit.engines``) is given of the
prepared bench (:class:`PreparedBench`; ``schedkit.bench.runner.Bench`` is the one)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedkit.bench.arms import ArmSpec, KvCacheDtype
from schedkit.bench.stats.compare import DEFAULT_MIN_EFFECT

if TYPE_CHECKING:
    from schedkit.config import SchedkitConfig
    from schedkit.records import RunResult
    from schedkit.sim.config import SimConfig
    from schedkit.sim.cost.model import LinearCostModel, RooflineCostModel
    from schedkit.workload import Workload

__all__ = ["ArmRunner", "BenchSpec", "PreparedBench"]


class BenchSpec(BaseModel):
    """Everything ``schedkit bench`` was asked to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    policies: list[str] = Field(default_factory=list)  # one arm each, the bench's settings
    arms: list[ArmSpec] = Field(default_factory=list)  # --arm: policy x engine settings
    engine: str = "sim"
    model: str = "Llama-3-8B"
    gpu: str = "H100-SXM"
    tp: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1, le=1024)  # simulated engines behind a router
    profile: str | None = None
    rate_scale: float = Field(default=1.0, gt=0)
    max_requests: int | None = Field(default=None, gt=0)
    seed: int = 0
    tokenizer: str | None = None  # request files with prompt text: counts their tokens
    slo_ttft_ms: float | None = Field(default=None, gt=0)
    slo_tpot_ms: float | None = Field(default=None, gt=0)
    goodput: bool = False
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    block_size: int = Field(default=16, gt=0)
    prefix_caching: bool = True
    kv_blocks: int | None = Field(default=None, gt=0)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    # the simulator's batches: None or True mix prefill chunks into decode steps (vLLM);
    # False runs prefill-only steps ahead of decode (SGLang). Real engines run their own.
    mixed_prefill: bool | None = None
    eviction_window: int | None = Field(default=None, ge=0)
    kv_cache_dtype: KvCacheDtype = "auto"  # vLLM's: its element size sizes the KV cache
    window: tuple[float, float] | None = None  # seconds of the trace, before --rate-scale
    min_effect: float = Field(default=DEFAULT_MIN_EFFECT, ge=0, lt=1)
    verdict_metrics: list[str] | None = None  # None: every one of METRIC_KEYS
    jobs: int | None = Field(default=None, gt=0)  # simulator arms run at once; None: cores
    record_steps: str | None = None  # real engines: a directory for one steps CSV per arm
    # --engine openai: the servers (one per arm), and the client's limits
    targets: list[str] = Field(default_factory=list)
    max_concurrency: int | None = Field(default=None, ge=1)
    request_timeout_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    max_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    serve_command: str | None = None  # one --target: a server per arm ({policy})
    server_start_timeout_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _some_arm(self) -> BenchSpec:
        if not self.policies and not self.arms:
            raise ValueError("no arm to run: give --policy NAME or --arm policy=NAME,...")
        return self


class PreparedBench(Protocol):
    """What an engine's arm runner reads of the prepared bench, with the arm's own engine
    settings applied (``Bench.for_arm``)."""

    spec: BenchSpec
    labels: list[str]
    configs: list[SchedkitConfig]
    cost: RooflineCostModel | LinearCostModel
    sim_config: SimConfig
    engine_info: dict[str, Any]
    out_dir: Path | None

    def workload(self, rate_scale: float) -> Workload: ...


class ArmRunner(Protocol):
    """An engine the bench can replay a workload on (entry-point group ``schedkit.engines``).

    Called once per arm (and per rate during a goodput search) with the prepared bench:
    ``bench.workload(rate_scale)``, ``bench.configs[index]``, ``bench.cost``,
    ``bench.sim_config`` and ``bench.spec`` hold everything an engine needs, with the
    arm's own engine settings applied (``Bench.for_arm``). The workload's
    requests already carry the bench's ``--slo-*`` targets where they had none of their own.
    """

    def __call__(self, bench: PreparedBench, index: int, rate_scale: float) -> RunResult: ...
