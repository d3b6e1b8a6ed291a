"""The per-scheduler glue between LMDeploy and the policy facade.

``LmdeployRuntime`` is the core kit's ``AdapterRuntime`` (facade, counters, metrics, step
ledger, finish bookkeeping) plus what only LMDeploy needs: views that ride on its
``SchedulerSequence``, arrivals and rejections, the waiting order, the prefill budget,
preemption victims, eviction ranks and step reports. Each patched LMDeploy method
delegates to it (``schedkit_lmdeploy.patches``); it never decides anything itself. One
runtime per ``Scheduler``, kept in ``scheduler.schedkit``.

Steps: LMDeploy runs prefill and decode in separate forward passes and never mixes them.
A step is opened when LMDeploy dispatches its batch (``Scheduler.activate_seqs``, which
the engine loop calls for every batch it sends to the model) and reported when the
scheduler next dispatches, or when a session ends (so a request's last step is reported
before its finish). LMDeploy's loop prefetches the next batch before the outputs of the
current one are applied, so a report may reach policies before the step's outputs do,
and a prefetched batch may hold a sequence that finished meanwhile: LMDeploy's forward
skips it, and its report leaves it out (only READY and RUNNING sequences count).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from schedkit import BatchBudget, PolicyFacade, RequestView
from schedkit.adapter import REJECTED, AdapterRuntime
from schedkit.adapter.runtime import report_of
from schedkit.facade import by_hook
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, TrustConfig

from schedkit_lmdeploy.views import LmdeployEngineView, LmdeployRequestView, NodeStates

__all__ = ["REJECTED", "LmdeployRuntime"]


class LmdeployRuntime(AdapterRuntime):
    """What a schedkit-enabled LMDeploy scheduler keeps in ``scheduler.schedkit``."""

    engine: LmdeployEngineView

    def __init__(
        self, scheduler: Any, facade: PolicyFacade, trust: TrustConfig | None = None
    ) -> None:
        super().__init__(facade, LmdeployEngineView(scheduler))
        self.scheduler = scheduler
        self.trust = trust or DEFAULT_TRUST
        self.seal = Seal.from_environ()  # set: only the edge's sealed metadata is trusted
        self.num_steps = 0
        self.turn_budget: int | None = None  # the policy's prefill tokens, this turn
        self._open: object | None = None  # the dispatched step not reported yet
        self._preempted: list[RequestView] = []  # since the last dispatch
        # seq_id -> (sequence, trie nodes of its last match), not counted as hits yet
        self._matched: dict[int, tuple[Any, list[Any]]] = {}
        self._views: dict[int, LmdeployRequestView] = {}  # seq_id -> its turn's view
        self._rank: dict[int, int] = {}  # seq_id -> place in the policy's last order
        self.nodes = NodeStates()  # LMDeploy's objects get no attribute of ours

    # -- requests -------------------------------------------------------------------

    def view(self, seq: Any) -> LmdeployRequestView:
        view = self._views.get(seq.seq_id)
        if view is None or view.seq is not seq:  # arrived before schedkit was installed
            view = self._new_view(seq)
        return view

    def _new_view(self, seq: Any) -> LmdeployRequestView:
        arrival = self.engine.since_epoch(float(seq.arrive_time))
        trie = self.scheduler.block_trie
        view = LmdeployRequestView(seq, arrival, self.trust, trie, self.nodes.ident, self.seal)
        self._views[seq.seq_id] = view
        return view

    def arrived(self, seq: Any) -> str | None:
        """A new request (a sequence, or a session's next turn) is waiting: observe it and
        decide its admission. A rejected one is stopped at once (never scheduled) and
        finishes ``rejected`` when its session ends; returns the reason, or None."""
        view = self._new_view(seq)
        reason = self.admission_reason(view)
        if reason is not None:
            view.rejected = reason
            seq.state.stop()
        return reason

    def rejection(self, seq: Any) -> str | None:
        """Why the policy rejected ``seq``'s current turn, or None."""
        view = self._views.get(seq.seq_id)
        return view.rejected if view is not None and view.seq is seq else None

    # -- waiting order and batch budget ---------------------------------------------

    def order(self, waiting: list[Any]) -> list[Any] | None:
        """``waiting`` (sequences) in the policy's order, or None for LMDeploy's."""
        if not waiting or not self.facade.has_order:
            return None
        started = time.perf_counter()
        order = self.facade.order_waiting([self.view(s) for s in waiting], self.engine)
        self.timed("order_waiting", started, order is not None)
        if order is None:
            return None
        ranked = [cast(LmdeployRequestView, v).seq for v in order]
        self._rank = {seq.seq_id: i for i, seq in enumerate(ranked)}
        return ranked

    def queue_order(self, seq: Any) -> tuple[int, float]:
        """Where ``seq`` stands in the queue the policy is shown (the engine's current
        order, as vLLM and the simulator keep it): the order the policy last returned,
        then the requests that joined since, by arrival."""
        return self._rank.get(seq.seq_id, len(self._rank)), float(seq.arrive_time)

    def plan(self) -> BatchBudget | None:
        """This prefill turn's budget when the policy changes LMDeploy's, else None:
        ``token_budget`` is ``max_prefill_token_num`` (the prefill batch's tokens),
        ``max_running`` is ``max_batches`` (ready plus running sequences)."""
        scheduler = self.scheduler
        default = BatchBudget(
            token_budget=int(scheduler.cache_config.max_prefill_token_num),
            max_running=int(scheduler.scheduler_config.max_batches),
        )
        started = time.perf_counter()
        budget = self.facade.plan_batch(self.engine, default)
        self.timed("plan_batch", started, budget != default)
        return None if budget == default else budget

    # -- preemption -----------------------------------------------------------------

    def victims(self, running: Sequence[Any], needing: Any) -> list[Any] | None:
        """The policy's preemption victims among ``running`` (sequences), or None."""
        views = [self.view(s) for s in running]
        started = time.perf_counter()
        chosen = self.facade.select_victims(views, self.view(needing), self.engine)
        self.timed("select_victims", started, chosen is not None)
        if chosen is None:
            return None
        return [cast(LmdeployRequestView, v).seq for v in chosen]

    def preempted(self, seq: Any) -> None:
        """LMDeploy preempted ``seq`` (recompute): reported with the next dispatched step."""
        view = self.view(seq)
        view.num_preemptions += 1
        self._preempted.append(view)
        self.released(seq)

    def released(self, seq: Any) -> None:
        """``seq`` is about to free its blocks: its cached ones were used now (as
        LMDeploy stamps a block's access time when it is freed)."""
        node, now, nodes = seq.prefix_cache.trie_cursor, self.engine.clock, self.nodes
        while node is not None and node.parent is not None:
            nodes.of(node).last_access = now
            node = node.parent

    # -- eviction -------------------------------------------------------------------

    def matched(self, seq: Any, nodes: list[Any]) -> None:
        """``seq``'s tentative prefix match found ``nodes``; they count as hits if LMDeploy
        admits it with that match (``dispatched``)."""
        if nodes:
            self._matched[seq.seq_id] = (seq, nodes)
        else:
            self._matched.pop(seq.seq_id, None)

    def _count_hits(self) -> None:
        """The sequences matched since the last dispatch that LMDeploy admitted (READY now)
        hit their matched blocks; a rolled-back match (still WAITING) is no hit."""
        from lmdeploy.pytorch.messages import MessageStatus

        now, pending = self.engine.clock, self._matched
        for key, (seq, nodes) in list(pending.items()):
            status = seq.status
            if status == MessageStatus.WAITING:
                continue  # its next attempt matches again
            del pending[key]
            if status == MessageStatus.READY:
                for node in nodes:
                    state = self.nodes.of(node)
                    state.hits += 1
                    state.last_access = now

    def eviction_ranks(self, leaves: Sequence[Any], num_blocks: int) -> dict[int, int] | None:
        """Position of each evictable trie leaf in the policy's eviction order (by ``id``),
        or None for LMDeploy's own (least recently used first)."""
        allocator, engine = self.scheduler.block_manager.allocator, self.engine

        def stamped(node: Any) -> float:  # LMDeploy's stamp: whole perf_counter seconds
            return engine.since_epoch(float(allocator.get_access_time(node.block_id)))

        views = [self.nodes.view(n, engine.block_size, stamped) for n in leaves]
        started = time.perf_counter()
        chosen = self.facade.select_evictions(views, min(num_blocks, len(views)), self.engine)
        self.timed("select_evictions", started, chosen is not None)
        if chosen is None:
            return None
        by_id = {view.block_hash: id(node) for view, node in zip(views, leaves, strict=True)}
        return {by_id[view.block_hash]: i for i, view in enumerate(chosen)}

    # -- steps ----------------------------------------------------------------------

    def dispatched(self, batch: Sequence[Any]) -> None:
        """LMDeploy dispatches ``batch`` to the model: the previous step is reported and
        this one opened. Each sequence computes its pending tokens (``num_token_ids``: a
        prompt, the next chunk of a long one up to ``kv_token_limit``, or the one token
        a decode step feeds back); it prefills unless it decodes that one token. Costs
        nothing per sequence when no policy observes steps (waiting keys need only the
        preempted requests)."""
        self.report_open()
        self.num_steps += 1
        self.engine.step_index = self.num_steps
        if self._matched:
            self._count_hits()
        preempted, self._preempted = self._preempted, []
        if not self.tracks_steps or not (batch or preempted):
            return
        if self.recorder is None and "on_step_finished" not in self.facade.implemented:
            # only waiting keys listen (the facade re-keys the preempted): no per-sequence work
            if preempted:
                key = self._open = object()
                self.open_step(key, report_of((), (), 0, 0, preempted))
            return
        from lmdeploy.pytorch.messages import MessageStatus

        live = (MessageStatus.READY, MessageStatus.RUNNING)
        known = self._views
        views: list[LmdeployRequestView] = []
        counts: list[int] = []
        prefill = 0
        for seq in batch:
            if seq.status not in live:  # finished or stopped while its batch was prefetched:
                continue  # LMDeploy's forward skips it, and so does the report
            view = known.get(seq.seq_id)
            if view is None or view.seq is not seq:
                view = self._new_view(seq)  # running since before schedkit was installed
            tokens = int(seq.num_token_ids)  # decoding: the one token sampled last
            limit = seq.kv_token_limit
            if limit is not None:  # a long prompt's non-final chunk
                tokens = min(tokens, int(limit) - int(seq.num_history_ids))
            views.append(view)
            counts.append(tokens)
            # one pending token is a decode step's, unless the turn has no output yet (a
            # one-token prompt: a recomputed sequence has all its tokens pending)
            if tokens > 1 or view.num_output_tokens == 0:
                prefill += tokens
        if not views and not preempted:
            return
        report = report_of(views, counts, prefill, sum(counts) - prefill, preempted)
        key = self._open = object()
        self.open_step(key, report)

    def report_open(self) -> None:
        """Report the dispatched step whose report is still open, if any."""
        key, self._open = self._open, None
        if key is not None:
            self.close_step(key)
        self.sync_metrics()

    # -- finishing ------------------------------------------------------------------

    def aborting(self, seq: Any) -> None:
        """LMDeploy stops ``seq``'s session before it finished (a client abort)."""
        view = self._views.get(seq.seq_id)
        if view is not None and view.seq is seq and not view.finished:
            view.aborted = True

    def finish(self, seq: Any) -> None:
        """``seq``'s session ends, or its next turn arrives: its turn finished, was
        aborted or was rejected (reported once per turn, after the turn's last step)."""
        view = self._views.pop(seq.seq_id, None)
        self._matched.pop(seq.seq_id, None)
        if view is None or view.seq is not seq or view.finished:
            return
        view.finished = True
        if view.rejected is not None:
            reason = REJECTED
        elif view.aborted:
            reason = "aborted"
        elif view.num_output_tokens >= view.max_tokens:
            reason = "length"
        else:
            from lmdeploy.pytorch.messages import MessageStatus

            reason = "stop" if seq.status == MessageStatus.STOPPED else "aborted"
        self.released(seq)
        self.report_open()
        self.request_finished(view, reason)

    def internal_state(self) -> dict[str, Any]:
        """schedkit's counters in this scheduler (the engine process's), for a launcher
        that reads them back."""
        return {
            "policy": self.facade.label,
            "policy_errors": self.policy_errors,
            "policy_errors_by_hook": by_hook(self.facade.errors),
            "slow_hook_calls": by_hook(self.facade.slow_calls),
            "steps": self.num_steps,
            "rejections": dict(self.rejections),
            "finished": dict(self.finished),
            "victims_placed": self.num_victims_placed,
            "evicted_by_policy": self.num_evicted_by_policy,
        }
