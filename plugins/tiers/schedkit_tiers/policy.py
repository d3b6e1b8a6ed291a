"""``tiers``: online and offline traffic in one engine.

Online (interactive) requests are served as if offline (batch) work were not there;
offline work fills the capacity online leaves idle, and gives it back first:

- **Class.** A request is offline when its priority is at least ``offline_priority`` (the
  operator's trust config sets priority by tenant, ``tenant_priority``) or its tenant is in
  ``offline_tenants``; every other request is online.
- **Order.** Online requests wait ahead of offline ones (each class in the engine's order).
- **Headroom.** ``plan_batch`` caps the running batch so that, while online requests wait,
  only they start; offline requests start only while more than ``kv_headroom`` of the KV
  cache is free and fewer than ``1 - seat_headroom`` of ``max_num_seqs`` seats are taken:
  an online arrival finds room without waiting for batch work to finish.
- **Step size.** While online requests run and none waits, a step computes at most
  ``offline_step_tokens`` tokens besides one per running request, so offline prefill
  does not stretch online's time per output token; with ``tpot_fill`` set, and where
  online requests carry TPOT targets, that cap adapts so steps take that fraction of the
  tightest one. With ``idle_step_tokens`` set, steps without online work are capped too,
  so an online arrival never waits long for the offline step in flight (for engines
  whose step time grows with every token, such as CPUs).
- **Preemption.** When KV blocks run out, offline requests are the victims first (newest
  first), then online ones (newest first): online preempts offline, never the reverse.
- **Progress.** Offline work is not starved: while it waits and its share of the tokens
  computed over the last ``share_window_s`` is below ``offline_min_share``, its oldest
  waiting request is served as online (one at a time), and so is any offline request
  that has waited ``offline_max_wait_s``.
- **Shedding.** With ``shed_offline_at_waiting`` set, an offline request arriving while
  that many requests wait is rejected (code ``offline_shed``); tiers never rejects online
  requests (compose with ``slo`` for that).

The policy keeps one entry per waiting request and a window of step counts; nothing else
grows with the run.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Sequence

from pydantic import Field
from schedkit import (
    Admission,
    BatchBudget,
    EngineView,
    Policy,
    PolicyOptions,
    RequestView,
    StepReport,
    hookimpl,
)

__all__ = ["Tiers"]


class Tiers(Policy):
    """Online first, offline in the headroom online leaves (see the module's docstring)."""

    class Options(PolicyOptions):
        offline_priority: int = Field(
            default=1,
            ge=-1000,
            le=1000,
            description="A request whose priority is at least this is offline (lower is"
            " served first, as in vLLM; the trust config's tenant_priority sets it by tenant).",
        )
        offline_tenants: tuple[str, ...] = Field(
            default=(),
            max_length=1000,
            description="Tenants whose requests are offline whatever their priority.",
        )
        kv_headroom: float = Field(
            default=0.1,
            ge=0.0,
            lt=1.0,
            description="Fraction of the KV cache kept free for online arrivals: offline"
            " requests start only while more than this is free.",
        )
        seat_headroom: float = Field(
            default=0.25,
            ge=0.0,
            lt=1.0,
            description="Fraction of max_num_seqs kept for online requests: offline requests"
            " start only while fewer than the rest are running.",
        )
        offline_min_share: float = Field(
            default=0.05,
            ge=0.0,
            le=1.0,
            description="While offline work waits and got less than this share of the tokens"
            " computed over share_window_s, its oldest request is served as online.",
        )
        offline_step_tokens: int = Field(
            default=512,
            ge=1,
            le=1 << 20,
            description="While online requests run and none waits, a step computes at most"
            " this many tokens besides one per running request (where tpot_fill adapts it:"
            " where it starts): offline prefill cannot stretch online's time per output token.",
        )
        tpot_fill: float = Field(
            default=0.0,
            ge=0.0,
            le=1.0,
            description="Where running online requests carry TPOT targets, adapt the step"
            " size so that steps take about this fraction of the tightest target: halve it"
            " after a slower step, grow it by an eighth after one under 90% of it; 0 (the"
            " default) keeps offline_step_tokens fixed. More offline throughput, less margin"
            " for online: see benchmarks/policies/tiers.md.",
        )
        idle_step_tokens: int | None = Field(
            default=None,
            ge=1,
            le=1 << 20,
            description="While no online request runs or waits, a step computes at most this"
            " many tokens besides one per running request (default: the engine's budget):"
            " it bounds how long an arriving online request waits for the offline step in"
            " flight. For engines whose step time grows with every token (CPUs).",
        )
        share_window_s: float = Field(default=30.0, gt=0.0, le=86_400.0)
        offline_max_wait_s: float | None = Field(
            default=None,
            gt=0.0,
            description="An offline request that has waited this long is served as online"
            " (set it to the batch's deadline less its service time); none by default.",
        )
        shed_offline_at_waiting: int | None = Field(
            default=None,
            ge=1,
            description="Reject an arriving offline request while this many requests wait"
            " (overload); offline work is queued, never shed, by default.",
        )

    options: Options

    def __init__(self, options: PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self._offline_tenants = frozenset(self.options.offline_tenants)
        self.waiting: dict[str, bool] = {}  # waiting request id -> served as online
        self.online_waiting = 0
        self.online_live: dict[str, float | None] = {}  # online, not finished -> TPOT target
        self._targets: Counter[float] = Counter()  # the live online TPOT targets (ms)
        self.step_tokens = self.options.offline_step_tokens  # the step cap, adapted
        self._capped = 0  # the token budget the last plan_batch capped the step at (0: none)
        self.promoted: set[str] = set()  # offline requests served as online until they leave
        self._oldest: list[tuple[float, str]] = []  # offline waiting: (arrival, id), lazily
        self._window: deque[tuple[float, int, int]] = deque()  # (clock, online, offline)
        self.served = [0, 0]  # tokens computed in the window: online, offline

    # -- classes -----------------------------------------------------------------------

    def offline(self, request: RequestView) -> bool:
        """Whether ``request`` belongs to the offline class (promotion aside)."""
        return (
            request.priority >= self.options.offline_priority
            or request.tenant in self._offline_tenants
        )

    def served_as_online(self, request: RequestView) -> bool:
        return not self.offline(request) or request.request_id in self.promoted

    # -- the waiting set ---------------------------------------------------------------

    def _join(self, request: RequestView) -> None:
        rid = request.request_id
        if rid in self.waiting:
            return
        online = self.served_as_online(request)
        self.waiting[rid] = online
        self.online_waiting += online
        if not online:
            heapq.heappush(self._oldest, (request.arrival_time, rid))

    def _leave(self, rid: str) -> None:
        online = self.waiting.pop(rid, None)
        if online:
            self.online_waiting -= 1

    def _promote(self, rid: str) -> None:
        self.promoted.add(rid)
        if self.waiting.get(rid) is False:
            self.waiting[rid] = True
            self.online_waiting += 1

    def _oldest_offline(self) -> tuple[float, str] | None:
        """The oldest offline request still waiting and not promoted (stale heap entries
        are dropped)."""
        heap = self._oldest
        while heap and self.waiting.get(heap[0][1]) is not False:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _progress(self, clock: float) -> None:
        """Promote offline requests past their wait limit, and the oldest one when offline
        is below its share and no promoted request waits already."""
        limit = self.options.offline_max_wait_s
        while limit is not None and (oldest := self._oldest_offline()):
            if clock - oldest[0] < limit:
                break
            self._promote(oldest[1])
        if self.options.offline_min_share <= 0 or len(self.waiting) == self.online_waiting:
            return
        online, offline = self.served
        if online + offline == 0:
            return
        if offline / (online + offline) >= self.options.offline_min_share:
            return
        if any(rid in self.waiting for rid in self.promoted):
            return
        if (oldest := self._oldest_offline()) is not None:
            self._promote(oldest[1])

    def _headroom(self, engine: EngineView, seats: int) -> bool:
        free = engine.kv_blocks_free / max(1, engine.kv_blocks_total)
        return free > self.options.kv_headroom and engine.num_running < seats

    # -- hooks -------------------------------------------------------------------------

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        limit = self.options.shed_offline_at_waiting
        if limit is None or not self.offline(request) or engine.num_waiting < limit:
            return None
        return Admission.reject(
            f"offline request shed: {engine.num_waiting} requests wait"
            f" (tiers sheds offline work at {limit})",
            code="offline_shed",
        )

    @hookimpl
    def on_request_arrived(self, request: RequestView) -> None:
        self._join(request)
        if not self.offline(request) and request.request_id not in self.online_live:
            target = request.slo_tpot_ms
            self.online_live[request.request_id] = target
            if target is not None:
                self._targets[target] += 1

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        tokens = [0, 0]
        for request, n in zip(report.scheduled, report.num_scheduled_tokens, strict=False):
            self._leave(request.request_id)
            tokens[self.offline(request)] += n
        for request in report.preempted:
            self._join(request)
        window, clock = self._window, engine.clock
        window.append((clock, tokens[0], tokens[1]))
        self.served[0] += tokens[0]
        self.served[1] += tokens[1]
        while window and window[0][0] < clock - self.options.share_window_s:
            _, online, offline = window.popleft()
            self.served[0] -= online
            self.served[1] -= offline
        if self._capped and report.num_steps:
            self._adapt(report.duration_s / report.num_steps)

    def _adapt(self, step_s: float) -> None:
        """Move the step cap toward steps of ``tpot_fill`` of the tightest online TPOT
        target, after a step it capped."""
        fill = self.options.tpot_fill
        if not fill or not self._targets:
            return
        target_s = min(self._targets) * fill / 1000.0
        if step_s > target_s:
            self.step_tokens = max(16, self.step_tokens // 2)
        elif step_s < 0.9 * target_s:
            self.step_tokens = min(self._capped, self.step_tokens + max(16, self.step_tokens // 8))

    @hookimpl
    def on_request_finished(self, request: RequestView) -> None:
        self._leave(request.request_id)
        self.promoted.discard(request.request_id)
        if (target := self.online_live.pop(request.request_id, None)) is not None:
            self._targets[target] -= 1
            if not self._targets[target]:
                del self._targets[target]

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        self._progress(engine.clock)
        return sorted(waiting, key=lambda r: not self.served_as_online(r))  # stable

    @hookimpl
    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget | None:
        self._progress(engine.clock)
        seats = max(1, int(default.max_running * (1.0 - self.options.seat_headroom)))
        running, tokens = engine.num_running, default.token_budget
        promoted = sum(1 for rid in self.promoted if rid in self.waiting)
        if self.online_live and self.online_waiting == promoted:
            # online requests decode, none waits to prefill: offline work, promoted or
            # not, only in small steps
            tokens = min(tokens, running + self.step_tokens)
        elif not self.online_live and self.options.idle_step_tokens:
            tokens = min(tokens, running + self.options.idle_step_tokens)
        if self.online_waiting:  # only requests served as online start, behind them none
            cap = running + self.online_waiting
        elif not self.waiting:
            cap = default.max_running
        elif self._headroom(engine, seats):
            cap = seats
        else:
            cap = running  # offline waits for headroom
        cap = max(1, min(cap, default.max_running))
        self._capped = default.token_budget if tokens < default.token_budget else 0
        if (tokens, cap) == (default.token_budget, default.max_running):
            return None
        return BatchBudget(tokens, cap, default.prefill_chunk)

    @hookimpl
    def victim_key(self, request: RequestView, engine: EngineView) -> tuple[bool, float]:
        # Lower is preempted first: offline before online, then the newest; the request
        # needing blocks never preempts an older request of its class.
        return (self.served_as_online(request), -request.arrival_time)
