"""What one arm of a benchmark produces: per-request records plus engine counters.

Every engine (simulated, twin, real) fills a ``RunResult``; metrics and reports are
computed from it alone, so they mean the same on every engine. The simulator fills them
and the bench reads them; this module imports neither, so ``schedkit.sim`` never
imports ``schedkit.bench``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The steps file (``--record-steps``; docs/calibration.md): a CSV with these columns in
# this order, after an optional first line of META_PREFIX + JSON naming what was recorded.
# Written by the adapters' recorders, read by the simulator's calibration.
STEP_COLUMNS = (
    "start_s", "end_s", "prefill_tokens", "decode_tokens", "kv_tokens", "attn_pairs",
    "batch_size", "num_running", "num_waiting", "seconds",
)  # fmt: skip
META_PREFIX = "# schedkit-steps "


@dataclass(slots=True)
class Handoff:
    """A disaggregated request's way between its prefill and decode instances
    (``schedkit.sim.disagg``): the instances, and when its prefill ended, the decode
    instance took KV blocks for it, its KV transfer started and landed, and its decode
    instance first scheduled it. Seconds on the engine clock; None: not reached."""

    prefill_replica: int
    decode_replica: int = -1
    prefill_end_s: float | None = None
    kv_alloc_s: float | None = None
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    decode_start_s: float | None = None


@dataclass(slots=True)
class RequestRecord:
    """One request's life. Times are seconds on the engine clock."""

    request_id: str
    tenant: str
    priority: int
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    output_tokens: int = 0
    finish_reason: str = ""  # "length", "stop", "rejected", "aborted", "error"; "" = unfinished
    reject_reason: str = ""  # why it was rejected, or (finish_reason "error") why it failed
    scheduled_s: float | None = None  # first time any of its tokens was scheduled
    first_token_s: float | None = None
    finish_s: float | None = None
    cached_tokens: int = 0  # prompt tokens served from the prefix cache at first admission
    preemptions: int = 0
    recomputed_tokens: int = 0  # computed tokens its preemptions threw away and redid
    handoff: Handoff | None = None  # served disaggregated: its way from prefill to decode
    deadline_s: float | None = None  # to finish within this many seconds of arrival

    @property
    def rejected(self) -> bool:
        return self.finish_reason == "rejected"


@dataclass(slots=True)
class TimelinePoint:
    """Engine state sampled after a step."""

    t: float
    waiting: int
    running: int
    kv_usage: float  # fraction of KV blocks referenced by requests


@dataclass
class RunResult:
    """Everything one arm produced."""

    policy: str
    records: list[RequestRecord]
    duration_s: float  # engine clock when the last request finished
    steps: int = 0
    preemptions: int = 0
    recomputed_tokens: int = 0
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0  # either tier's: the GPU prefix cache's and host memory's
    host_hit_tokens: int = 0  # of which loaded from host memory (KV offloading)
    policy_errors: int = 0
    policy_errors_by_hook: dict[str, int] = field(default_factory=dict)
    slow_hook_calls: dict[str, int] = field(default_factory=dict)  # "policy.hook" -> count
    rejections: dict[str, int] = field(default_factory=dict)  # reason -> count
    errors: dict[str, int] = field(default_factory=dict)  # live replay: failure -> count
    # (gap seconds, tokens): inter-token gaps; a run of identical decode steps adds its
    # mean gap once, weighted by the tokens it produced.
    itl: list[tuple[float, int]] = field(default_factory=list)
    timeline: list[TimelinePoint] = field(default_factory=list)
    kv_usage_mean: float = 0.0  # time-weighted over the run
    wall_s: float = 0.0  # host seconds the run took
    routed: list[int] = field(default_factory=list)  # a cluster's: requests per replica
    decode_routed: list[int] = field(default_factory=list)  # disaggregated: per decode instance
