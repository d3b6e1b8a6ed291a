"""What a bench run says, as typed models: ``results.json`` is :class:`Results` dumped, its
JSON schema is generated from these classes (``schedkit/data/results.schema.json``,
checked against ``docs/results.md`` by the tests), and the report, its tables and verdicts
read them.

Keys that only some runs have (``goodput_rps`` with ``--goodput``, ``tenants`` with several
tenants, ``routed`` with replicas) are optional fields left out of the file when a run
does not set them: :meth:`Results.to_json` dumps what was set, so a key's absence keeps
its meaning. Unknown keys are refused (``extra="forbid"``): a key added to the output
without its field here fails every run that writes it, and so the tests.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "BETTER",
    "INCONCLUSIVE",
    "NO_DIFFERENCE",
    "SCHEMA_VERSION",
    "TONES",
    "WORSE",
    "Arm",
    "ArmMetrics",
    "Comparison",
    "Episode",
    "Flag",
    "GroupMetrics",
    "MetricRow",
    "Provenance",
    "Results",
    "Slo",
    "Summary",
    "Tone",
    "WorkloadInfo",
    "percentile_key",
    "results_schema",
]

SCHEMA_VERSION = 3  # raised whenever a key changes meaning or goes away (docs/results.md)

# The verdict of one compared metric, in the words every output uses for it: the headline,
# the reports' tables and badges, the command's summary and results.json's ``tone``.
BETTER: Final = "better"
WORSE: Final = "worse"
NO_DIFFERENCE: Final = "no meaningful difference"  # within the minimum effect
INCONCLUSIVE: Final = "inconclusive"  # changes beyond it are possible both ways, or no interval
Tone = Literal["better", "worse", "no meaningful difference", "inconclusive"]
#: The verdicts in the order a reader is shown them: regressions first.
TONES: tuple[Tone, ...] = (WORSE, BETTER, INCONCLUSIVE, NO_DIFFERENCE)
_OLD_TONES = {"same": NO_DIFFERENCE}  # schema 2 wrote "same"


class _Model(BaseModel):
    """A part of the results; read by attribute. ``model["key"]``, ``model.get`` and
    ``"key" in model`` read it as the dict results.json holds, for code written when
    results were dicts (a key a run did not set is missing, as in the file)."""

    model_config = ConfigDict(extra="forbid")

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set or key in (self.model_extra or {})

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self else default


def percentile_key(q: float) -> str:
    """A percentile's name as vllm bench serve writes it: p99, p99.9, p95."""
    return f"p{int(q)}" if float(q).is_integer() else f"p{q:g}"


class Summary(_Model):
    """A latency summary in ms; every entry None without samples."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    # --metric-percentiles beyond these, for --percentile-metrics: {"p99.9": ...}
    percentiles: dict[str, float | None] | None = None

    def at(self, q: float) -> float | None:
        """The ``q``-th percentile, None where the run did not compute it."""
        key = percentile_key(q)
        if key in ("p50", "p90", "p99"):
            value: float | None = getattr(self, key)
            return value
        return (self.percentiles or {}).get(key)


class GroupMetrics(_Model):
    """Counts, latency summaries and attainment of one tenant's or priority's requests."""

    requests: int
    completed: int
    rejected: int
    output_tokens: int
    ttft_ms: Summary
    tpot_ms: Summary
    queue_ms: Summary
    queue_ms_max: float | None
    slo_attainment: float | None
    slo_met: int | None
    throughput_tok_s: float | None = None  # output tokens per second of the run
    deadline_met: int | None = None  # completed within their deadline (None: no deadlines)
    deadline_attainment: float | None = None  # deadline_met over requests with a deadline


class DisaggMetrics(_Model):
    """A disaggregated arm's: requests per decode instance (``routed`` counts the prefill
    instances'), and where its completed requests spent their time
    (``schedkit.bench.stats.metrics.PHASES``)."""

    routed_decode: list[int]
    phases_ms: dict[str, Summary]


class ArmMetrics(_Model):
    """Every metric of one arm (definitions: ``schedkit.bench.stats.metrics``)."""

    policy: str
    requests: int
    completed: int
    rejected: int
    unfinished: int
    rejections: dict[str, int]
    failed: int
    errors: dict[str, int]
    ttft_ms: Summary
    tpot_ms: Summary
    itl_ms: Summary
    e2e_ms: Summary
    queue_ms: Summary
    queue_ms_max: float | None
    output_tokens: int
    throughput_tok_s: float  # output tokens/s over the run's duration
    # vLLM's request_throughput, total_token_throughput, request_goodput (None: no SLO);
    # None in files written before they were added
    request_throughput_rps: float | None = None
    total_token_throughput_tok_s: float | None = None
    request_goodput_rps: float | None = None
    preemptions: int
    recomputed_tokens: int
    prefix_hit_rate: float | None
    kv_usage_mean: float
    slo_attainment: float | None
    slo_met: int | None
    policy_errors: int
    policy_errors_by_hook: dict[str, int]
    slow_hook_calls: int
    slow_hook_calls_by_hook: dict[str, int]
    duration_s: float
    steps: int
    wall_s: float
    # only some runs have these
    routed: list[int] | None = None
    disaggregated: DisaggMetrics | None = None
    tenants: dict[str, GroupMetrics] | None = None
    jain_fairness: float | None = None
    jain_ttft: float | None = None
    priorities: dict[str, GroupMetrics] | None = None
    goodput_rps: float | None = None
    goodput_rate_scale: float | None = None


class Arm(_Model):
    policy: str  # the arm's label
    config: dict[str, Any]  # its policies and options (SchedkitConfig dumped)
    engine_settings: dict[str, Any]  # what the arm sets itself; {} for a --policy arm
    engine: dict[str, Any] | None  # the arm's engine when it sets any; else the bench's
    metrics: ArmMetrics


class Flag(_Model):
    """What no interval can say; ``kind`` and ``message`` always, the rest by kind
    (docs/results.md lists every key)."""

    model_config = ConfigDict(extra="allow")

    kind: Literal[
        "policy_errors",
        "slow_hooks",
        "overload",
        "truncated",
        "starvation",
        "rejections",
        "episode",
    ]
    message: str


class Episode(_Model):
    """The stretch of the run that carries a metric's difference, so that it has no
    interval (``schedkit.bench.stats.episodes``)."""

    sections: list[int]  # [first, last], 1-based
    of: int  # sections the run was cut into
    share: float  # the stretch's share of the sections' absolute differences
    ratio: float | None  # its mean |difference| over the other sections'; None: they have none
    arm: str  # the arm whose value moved most there
    peak: float  # that arm's value in its most moved section (a total: at the run's scale)
    elsewhere: float  # its median over the other sections
    from_s: float | None  # arrival of the stretch's first request, simulated seconds
    to_s: float | None  # arrival of its last request


class MetricRow(_Model):
    """One judged metric of a comparison."""

    metric: str
    label: str
    unit: Literal["ms", "rate", "count", "tok/s"]
    higher_is_better: bool
    a: float | None
    b: float | None
    diff: float | None
    rel: float | None
    ci: list[float] | None
    rel_ci: list[float] | None
    significant: bool
    sections: int
    better: bool | None
    tone: Tone
    leaning: Literal["better", "worse"] | None
    verdict: str
    # why ``ci`` is null, as every output prints it; null with an interval, and in files
    # written before it was added (then "no interval")
    no_interval: str | None = None
    episode: Episode | None = None  # where one stretch carries the difference

    @field_validator("tone", mode="before")
    @classmethod
    def _older_tone(cls, value: Any) -> Any:
        """A results.json of schema 2 said ``same`` for no meaningful difference."""
        return _OLD_TONES.get(value, value) if isinstance(value, str) else value


class Method(_Model):
    name: str
    max_sections: int
    confidence: float


class Comparison(_Model):
    baseline: str
    policy: str
    n_requests: int
    summary: str
    method: Method
    min_effect: float
    metrics: list[MetricRow]
    verdicts: list[str]
    flags: list[Flag]


class WorkloadInfo(_Model):
    name: str
    source: str
    requests: int
    span_s: float
    rate_rps: float
    prompt_p50: int
    prompt_p90: int
    prompt_max: int
    output_p50: int
    output_p90: int
    output_max: int
    tenants: list[str]
    hash_block_tokens: int
    rate_scale: float
    seed: int
    window_s: list[float] | None
    max_requests: int | None
    # how requests were sent, where not at their (rescaled) arrival times; absent before
    all_at_once: bool = False  # --request-rate inf
    max_concurrency: int | None = None  # the client's limit of requests in flight


class Slo(_Model):
    ttft_ms: float | None
    tpot_ms: float | None


class Provenance(_Model):
    schedkit_version: str | None
    git_revision: str | None
    command: list[str]
    python: str
    numpy: str
    platform: str
    created_utc: str
    spec: dict[str, Any]


class Results(_Model):
    """One bench run: ``results.json``."""

    schema_version: int = SCHEMA_VERSION
    provenance: Provenance
    workload: WorkloadInfo
    # the engine and its settings: which keys depends on the engine (docs/results.md)
    engine: dict[str, Any]
    slo: Slo
    arms: list[Arm]
    warnings: list[str]
    flags: list[Flag]
    comparisons: list[Comparison] = Field(default_factory=list)

    def arm(self, label: str) -> Arm:
        """The arm labelled ``label``."""
        for arm in self.arms:
            if arm.policy == label:
                return arm
        raise KeyError(label)

    def arm_engine(self, arm: Arm) -> dict[str, Any]:
        """The engine ``arm`` ran on: its own when it set any setting, else the bench's."""
        return arm.engine if arm.engine is not None else self.engine

    def to_json(self) -> dict[str, Any]:
        """What results.json holds: every key set, optional ones a run did not set left out."""
        dumped: dict[str, Any] = self.model_dump(exclude_unset=True)
        dumped.setdefault("schema_version", self.schema_version)
        dumped.setdefault("comparisons", [])
        return dumped


def results_schema() -> dict[str, Any]:
    """results.json's JSON schema, generated from :class:`Results`."""
    schema = Results.model_json_schema(mode="serialization")
    schema["$id"] = "https://schedkit.dev/results.schema.json"
    schema["title"] = f"schedkit bench results.json, schema version {SCHEMA_VERSION}"
    return schema


if __name__ == "__main__":  # python -m schedkit.bench.results > schedkit/data/results.schema.json
    print(json.dumps(results_schema(), indent=2, sort_keys=True))
