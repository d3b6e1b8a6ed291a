"""What ``schedkit bench`` is asked to do (:class:`BenchSpec`), and what an engine's arm
runner (:class:`ArmRunner`, entry-point group ``schedkit.engines``) is given of the
prepared bench (:class:`PreparedBench`; ``schedkit.bench.runner.Bench`` is the one)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schedkit.bench.arms import ArmSpec
from schedkit.bench.settings import EngineSpec

if TYPE_CHECKING:
    from schedkit.bench.disagg import Disaggregation
    from schedkit.config import SchedkitConfig
    from schedkit.records import RunResult
    from schedkit.sim.config import SimConfig
    from schedkit.sim.cost.calibration import StepCostModel
    from schedkit.workload import Workload

__all__ = [
    "GROUPS",
    "ArmRunner",
    "BenchSpec",
    "LiveSpec",
    "PreparedBench",
    "StatsSpec",
    "WorkloadSpec",
]


VllmLatency = Literal["ttft", "tpot", "itl", "e2el"]  # vllm bench serve's latency names
DEFAULT_MIN_EFFECT = 0.02  # the smallest change the verdicts call better or worse


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadSpec(_Group):
    """The request stream every arm replays."""

    name: str = Field(
        description="Trace name (azure-conv, azure-code, mooncake-conv, ...), spec or file."
    )
    rate_scale: float = Field(default=1.0, gt=0, description="Multiply the arrival rate.")
    max_requests: int | None = Field(
        default=None, gt=0, description="Replay only the first N requests."
    )
    seed: int = Field(default=0, description="Seed for synthetic workloads; traces ignore it.")
    tokenizer: str | None = Field(
        default=None,
        description="Counts the tokens of a request file with prompt text (vllm bench custom"
        " JSONL or ShareGPT, guidellm data): a Hugging Face name or a local directory.",
    )
    window: tuple[float, float] | None = Field(
        default=None,
        description="Replay only arrivals in START:END seconds of the trace (e.g. 300:600);"
        " seconds of the trace, before --rate-scale.",
    )
    all_at_once: bool = Field(
        default=False,
        description="Every request arrives at 0 s, in trace order (--request-rate inf, as"
        " vllm bench serve): the engine's maximum throughput; with --max-concurrency, a"
        " closed loop.",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="At most this many requests in flight: a request is sent at its arrival"
        " or when one in flight finishes, whichever is later, and its latencies count from"
        " then (vllm bench serve --max-concurrency). Simulator (one replica) and --engine"
        " openai.",
    )


class StatsSpec(_Group):
    """What the arms are judged by: SLOs, goodput, and the verdicts' rules."""

    slo_ttft_ms: float | None = Field(
        default=None,
        gt=0,
        description="TTFT SLO in ms, for requests without their own (policies see it).",
    )
    slo_tpot_ms: float | None = Field(
        default=None,
        gt=0,
        description="TPOT SLO in ms, for requests without their own (policies see it).",
    )
    goodput: bool = Field(
        default=False, description="Search the highest rate meeting SLOs for 90% of requests."
    )
    min_effect: float = Field(
        default=DEFAULT_MIN_EFFECT,
        ge=0,
        lt=1,
        description="Smallest change worth a verdict: relative for latencies and totals,"
        " in points for rates (0.02 = 2%, 2 pp).",
    )
    verdict_metrics: list[str] | None = Field(
        default=None,
        description="Comma-separated metrics to give verdicts on (default: all).",
    )
    percentile_metrics: list[VllmLatency] = Field(
        default_factory=lambda: list[VllmLatency](["ttft", "tpot", "itl"]),
        description="Comma-separated metrics whose percentiles the summary prints, by vllm"
        " bench serve's names: ttft, tpot, itl, e2el.",
    )
    metric_percentiles: list[float] = Field(
        default_factory=lambda: [99.0],
        description="Comma-separated percentiles of those metrics, as vllm bench serve"
        " (e.g. 25,50,75,99.9); the summary also prints each one's mean and median.",
    )

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles(cls, values: list[float]) -> list[float]:
        bad = [v for v in values if not 0 < v < 100]
        if bad or not values:
            raise ValueError(
                f"--metric-percentiles takes percentiles above 0 and below 100, like 50,90,99;"
                f" got {','.join(f'{v:g}' for v in values) or 'none'}"
            )
        return values


class LiveSpec(_Group):
    """``--engine openai``: the running servers (one per arm) and the client's limits."""

    targets: list[str] = Field(
        default_factory=list,
        description="--engine openai: a server's base URL (http://host:port); one per arm, in"
        " arm order.",
    )
    request_timeout_s: float = Field(
        default=600.0,
        gt=0,
        allow_inf_nan=False,
        description="--engine openai: seconds a request may take in all.",
    )
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="--engine openai: send no request that arrives later than this.",
    )
    serve_command: str | None = Field(
        default=None,
        description="--engine openai with one --target: start this server command for each arm"
        " ({policy}: the arm's policy), replay once --target answers, then stop it.",
    )
    server_start_timeout_s: float = Field(
        default=600.0,
        gt=0,
        allow_inf_nan=False,
        description="--serve-command: seconds a server may take to answer.",
    )


GROUPS: dict[str, type[BaseModel]] = {
    "workload": WorkloadSpec,
    "settings": EngineSpec,
    "stats": StatsSpec,
    "live": LiveSpec,
}
# a setting's flat name (BenchSpec(max_num_seqs=64)) -> its group
GROUP_OF: dict[str, str] = {
    name: group for group, model in GROUPS.items() for name in model.model_fields
}
del GROUP_OF["name"]  # the workload's name is BenchSpec(workload="...")


class BenchSpec(BaseModel):
    """Everything ``schedkit bench`` was asked to do: the workload, the arms (``policies``
    with the bench's engine settings, ``arms`` with their own), the engine that runs them
    and its settings, what they are judged by, and the live servers.

    Settings may also be given flat, as on the command line:
    ``BenchSpec(workload="azure-conv", policies=["fcfs"], max_num_seqs=64)`` puts
    ``max_num_seqs`` in ``settings``; read it there (``spec.settings.max_num_seqs``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: WorkloadSpec
    policies: list[str] = Field(
        default_factory=list,
        description="Policy, composition 'a+b', or config file (its [engine] table sets the"
        " arm's engine settings); repeat per arm.",
    )
    arms: list[ArmSpec] = Field(
        default_factory=list,
        description="An arm with engine settings of its own, e.g."
        " name=seqs64,policy=fcfs,max_num_seqs=64 (keys: name, policy and the engine"
        " flags below in snake_case); repeat per arm. Simulator only.",
    )
    engine: str = Field(
        default="sim",
        description="Engine: sim (the simulator), openai (running servers, --target), or an"
        " adapter's in-process engine: vllm, vllm-twin, sglang.",
    )
    settings: EngineSpec = Field(default_factory=EngineSpec)
    stats: StatsSpec = Field(default_factory=StatsSpec)
    live: LiveSpec = Field(default_factory=LiveSpec)
    jobs: int | None = Field(
        default=None,
        gt=0,
        description="Simulator arms run at once, in forked processes (default: one per core);"
        " a policy's atexit handlers run in them, as with --jobs 1.",
    )
    record_steps: str | None = Field(
        default=None,
        description="Real engines: write each arm's engine steps to DIR/<arm>.csv, for"
        " schedkit calibrate.",
    )

    def __init__(self, **data: Any) -> None:
        """Fields by group or flat (``workload="azure-conv"``, ``max_num_seqs=64``)."""
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        """Flat settings (``max_num_seqs=64``, ``workload="azure-conv"``) into their groups."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("workload"), str):
            data["workload"] = {"name": data["workload"]}
        for key in [k for k in data if k in GROUP_OF]:
            group = GROUP_OF[key]
            part = data.get(group, {})
            part = part.model_dump() if isinstance(part, BaseModel) else dict(part)
            part[key] = data.pop(key)
            data[group] = part
        return data

    @model_validator(mode="after")
    def _some_arm(self) -> BenchSpec:
        if not self.policies and not self.arms:
            raise ValueError("no arm to run: give --policy NAME or --arm policy=NAME,...")
        return self

    def replace(self, **changes: Any) -> BenchSpec:
        """This spec with ``changes``, flat or by group, validated."""
        return type(self).model_validate({**self.model_dump(), **changes})

    def with_settings(self, overrides: dict[str, Any]) -> BenchSpec:
        """This spec with an arm's engine settings over the bench's."""
        if not overrides:
            return self
        return self.replace(settings=self.settings.model_copy(update=overrides))

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            group = GROUP_OF.get(name)
            if group is None:
                return super().__getattr__(name)
            import warnings

            warnings.warn(
                f"BenchSpec.{name} is BenchSpec.{group}.{name}; read it there (the flat name"
                " goes in a later release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(getattr(self, group), name)


class PreparedBench(Protocol):
    """What an engine's arm runner reads of the prepared bench, with the arm's own engine
    settings applied (``Bench.for_arm``)."""

    spec: BenchSpec
    labels: list[str]
    configs: list[SchedkitConfig]
    cost: StepCostModel
    sim_config: SimConfig
    engine_info: dict[str, Any]
    out_dir: Path | None
    # a disaggregated arm's deployment (the simulator's alone), and each arm's policies
    # for its prefill and decode pools where they are not the arm's own
    disagg: Disaggregation | None
    pool_configs: list[tuple[SchedkitConfig | None, SchedkitConfig | None]]

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
