"""The contract suite's LMDeploy driver: a scenario through LMDeploy's real scheduler,
model-less, on CPU.

``run_lmdeploy`` builds LMDeploy's ``Scheduler`` (its real prefill scheduler, block
manager, prefix trie and eviction helper) and drives it the way LMDeploy's engine loop
does (``engine/inputs_maker.py``, ``engine/engine_loop.py``, 0.18): each step is either a
prefill turn (``Scheduler.schedule(is_prefill=True)``) or a decode step
(``schedule_running`` over the running sequences), chosen by ``do_prefill_default``'s
rule (prefill when the waiting prompts fill a prefill budget, when fewer than half of
``max_batches`` run, or after ``prefill_interval`` decode steps); a prefill turn that
admits nothing falls back to decode; each allocation reserves ``prefill_interval``
tokens ahead (LMDeploy's AR strategy). The batch is dispatched (``activate_seqs``), and
the fabricated forward samples one token per sequence (``ARSequenceStrategy``'s update).
A sequence that reached its ``max_new_tokens`` stops, and its session ends, as the
engine does once the client has its last token. A rejected request's session ends at
once (the engine answers it without scheduling it).

Scenario mapping: ``max_num_seqs`` is ``max_batches``, ``max_num_batched_tokens`` is
``max_prefill_token_num`` (LMDeploy's prefill budget; decode steps are separate),
``num_blocks`` GPU blocks of ``block_size`` tokens, prefix caching as configured.
``policies=None`` drives the stock scheduler (for equivalence checks). Every step
lasts ``scenario.step_s`` on the engine clock the policies see.

Not modelled: LMDeploy's prefetch (the real loop forms step N+1 while step N runs, with
lengths one step old, and applies step N's outputs after). The driver is synchronous, as
the vLLM driver's ``batch_queue=1``: the contract is checked on that schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedkit.bench.engines.requests import output_token_id, prompt_token_ids, request_metadata
from schedkit.config import SchedkitConfig
from schedkit.policy import Policy
from schedkit.testing.contract import Outcome, Scenario, facade_of

from schedkit_lmdeploy.harness.modelless import (
    PREFILL_INTERVAL,
    build_scheduler,
    cached_only_blocks,
    check_blocks,
)

# build_scheduler and the block checks are here too, as before they moved (issue #36)
__all__ = [
    "PREFILL_INTERVAL",
    "build_scheduler",
    "cached_only_blocks",
    "check_blocks",
    "contract_engines",
    "run_lmdeploy",
]

_EPS = 1e-9

if TYPE_CHECKING:
    from schedkit.testing.contract_run import ContractEngine
    from schedkit.workload import TraceRequest

    from schedkit_lmdeploy.runtime import LmdeployRuntime


class _Loop:
    """LMDeploy 0.18's choice of the next forward (``_ForwardInputsTask.run`` and
    ``InputsMakerAsync``): prefill, decode, or the next chunk of a long prompt, with the
    long-context interleaving (a long prompt runs in chunks of ``max_prefill_token_num``
    as single-sequence batches; after a chunk, decode and short prefills get a turn;
    ``LMDEPLOY_PT_TTFT_SHORT_TURNS`` short prefills at most before the next chunk)."""

    SHORT_TURNS = 3  # LMDEPLOY_PT_TTFT_SHORT_TURNS's default

    def __init__(self, scheduler: Any, max_batches: int, max_prefill: int) -> None:
        self.scheduler = scheduler
        self.max_batches = max_batches
        self.max_prefill = max_prefill
        self.running: list[Any] = []  # InputsMaker.running_seqs: the decode batch
        self.chunked: Any = None  # LongContextChunker.seq: the prompt being chunked
        self.decode_count = 0
        self.short_turns = 0  # short prefills since the last long chunk
        self.last_kind: str | None = None

    # -- InputsMakerAsync ------------------------------------------------------------

    def wants_prefill(self) -> bool:  # do_prefill_default
        scheduler = self.scheduler
        pending_last_chunk = self.chunked is not None and self.last_chunk()
        if not scheduler.has_waiting() and not pending_last_chunk:
            self.decode_count = 0
            return False
        if pending_last_chunk:
            return True
        if self.decode_count >= PREFILL_INTERVAL:
            return True
        tokens = 0
        for seq in scheduler.waiting:
            tokens += seq.num_token_ids
            if tokens >= self.max_prefill:
                return True
        if scheduler.num_ready() + scheduler.num_running() < self.max_batches * 0.5:
            return True
        self.decode_count += 1
        return False

    def last_chunk(self) -> bool:
        return self.chunked is None or self.chunked.num_token_ids <= self.max_prefill

    def turn_due(self) -> bool:
        return self.short_turns >= self.SHORT_TURNS

    # -- _ForwardInputsTask -----------------------------------------------------------

    def next_forward(self) -> tuple[str, list[Any], list[Any], int]:
        """(kind, batch, sequences the decode step could not grow, chunk tokens)."""
        self.result: tuple[str, list[Any], list[Any], int] = ("", [], [], 0)
        self.tried_long = self.tried_short = self.deferred = self.blocked = False
        has_waiting = self.scheduler.has_waiting
        prefill = self.wants_prefill()
        if self.chunked is not None:
            if self._defer_chunk(prefill):
                self.deferred = True
            elif not self.last_chunk() and has_waiting() and not self.turn_due():
                self._short_prefill()
                if not self.result[1]:
                    self._chunk()
            else:
                self._chunk()
        elif prefill:
            long_waiting = self.scheduler.has_waiting_long_prefill()
            if long_waiting and not self.turn_due():
                self._short_prefill()
                if not self.result[1]:
                    self.tried_long = True
                    self._prefill(prefer_long=True)
            else:
                self._prefill(prefer_long=long_waiting)
                self.tried_long = long_waiting
        if (not self.result[1] and self.tried_long and not self.blocked
                and not self.tried_short and has_waiting()):  # fmt: skip
            self._short_prefill()
        if not self.result[1] and self.running:
            self._decode()
        if (not self.result[1] and self.deferred and not self.tried_short
                and not self.turn_due() and has_waiting()):  # fmt: skip
            self._short_prefill()
        if not self.result[1] and self.deferred and self.chunked is not None:
            self._chunk()
        if self.result[1] and self.result[0] != "decode":
            self.decode_count = 0
        return self.result

    def _defer_chunk(self, prefill: bool) -> bool:
        if self.last_chunk():
            return bool(self.running) and not prefill
        return self.last_kind == "long_context_chunk"

    def _short_prefill(self) -> None:
        self.tried_short = True
        self._prefill(allow_long=False)
        if self.result[1]:
            self.short_turns += 1

    def _prefill(self, allow_long: bool = True, prefer_long: bool = False) -> None:
        output = self.scheduler.schedule(
            is_prefill=True,
            prealloc_size=PREFILL_INTERVAL,
            allow_long_prefill=allow_long,
            prefer_long_prefill=prefer_long,
        )
        batch = list(output.running)
        if len(batch) == 1 and batch[0].num_token_ids > self.max_prefill:
            self.chunked = batch[0]
            if self.last_chunk():
                self.chunked = None
            else:
                size = min(batch[0].num_token_ids, self.max_prefill)
                self.result = ("long_context_chunk", batch, [], size)
                self.short_turns = 0
                return
        if batch:
            self.result = ("prefill", batch, [], 0)

    def _chunk(self) -> None:
        self.tried_long = True
        seq, last = self.chunked, self.last_chunk()
        size = min(seq.num_token_ids, self.max_prefill)
        prealloc = PREFILL_INTERVAL if last else 0
        if not self.scheduler.reserve_long_context_chunk(seq, size, prealloc, is_last_chunk=last):
            self.blocked = True
            return
        if last:
            self.chunked = None
            self.result = ("last_long_context_chunk", [seq], [], 0)
        else:
            self.result = ("long_context_chunk", [seq], [], size)
        self.short_turns = 0

    def _decode(self) -> None:
        running = self.running
        valid = self.scheduler.schedule_running(running, 1, PREFILL_INTERVAL)
        batch = [s for s, ok in zip(running, valid, strict=True) if ok]
        invalid = [s for s, ok in zip(running, valid, strict=True) if not ok]
        self.result = ("decode", batch, invalid, 0)


def run_lmdeploy(
    scenario: Scenario,
    policies: Sequence[tuple[str, Policy]] | None,
    *,
    max_steps: int = 20_000,
    probe: Callable[[Any], None] | None = None,
    conserve: bool = False,
) -> Outcome:
    """``scenario`` through LMDeploy's scheduler with ``policies`` (None: stock).
    ``probe(scheduler)`` sees the scheduler before the first step; ``conserve``: check
    after every step that no KV block is lost (``check_blocks``)."""
    replay = _Replay(scenario, policies, conserve)
    if probe is not None:
        probe(replay.scheduler)
    for _ in range(max_steps):
        replay.arrive()
        if replay.done:
            break
        replay.step()
    else:
        raise AssertionError(f"lmdeploy: {scenario.name} still busy after {max_steps} steps")
    return replay.finish()


class _Replay:
    """One scenario through LMDeploy's scheduler (``run_lmdeploy``): the scheduler and its
    runtime, the engine loop's choice of forward (``_Loop``), the engine clock (the
    scenario's ``step_s`` per forward; idle time skips to the next arrival) and the
    ``Outcome`` being recorded."""

    def __init__(
        self,
        scenario: Scenario,
        policies: Sequence[tuple[str, Policy]] | None,
        conserve: bool,
    ) -> None:
        from lmdeploy.pytorch.messages import MessageStatus

        from schedkit_lmdeploy.patches import install

        self.scenario = scenario
        self.conserve = conserve
        cfg = self.cfg = scenario.config
        self.outcome = Outcome("lmdeploy", batches_comparable=False)
        self.scheduler = build_scheduler(
            cfg.num_blocks,
            cfg.block_size,
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
            cfg.enable_prefix_caching,
        )
        self.clock = 0.0
        self.runtime: LmdeployRuntime | None = None
        if policies is not None:
            self.runtime = install(self.scheduler, facade_of(policies, self.outcome.recorder))
            self.runtime.engine.use_clock(lambda: self.clock)
        self.traces = sorted(enumerate(scenario.requests), key=lambda item: item[1].arrival_s)
        self.rid_of: dict[int, str] = {}  # session id -> request id
        self.index_of: dict[str, int] = {}
        self.loop = _Loop(self.scheduler, cfg.max_num_seqs, cfg.max_num_batched_tokens)
        self.running_status = MessageStatus.RUNNING

    @property
    def done(self) -> bool:
        """Every request arrived and every session ended."""
        return not self.traces and not self.scheduler.sessions

    # -- arrivals ----------------------------------------------------------------------

    def arrive(self) -> None:
        """Add every request whose arrival has come on the engine clock. LMDeploy stamps
        a sequence's arrival when it is added: the clock reads the request's arrival
        time meanwhile (it arrived then, during the step just run), so arrival_time is
        the scenario's on the clock the policies read, as on every engine."""
        now = self.clock
        while self.traces and self.traces[0][1].arrival_s <= now + _EPS:
            index, trace = self.traces.pop(0)
            self.clock = trace.arrival_s
            try:
                self._add(index, trace)
            finally:
                self.clock = now

    def _add(self, index: int, trace: TraceRequest) -> None:
        """Request ``index`` as a session of its own, its metadata in ``schedkit_meta`` (as
        the request carrier puts it; ``seq.meta`` when stock). A rejected one ends at once:
        the engine answers it, and the client ends the session."""
        import numpy as np
        from lmdeploy.pytorch.messages import SamplingParam

        cfg, rid = self.cfg, trace.request_id
        self.rid_of[index] = rid
        self.index_of[rid] = index
        self.outcome.output_tokens[rid] = 0
        tokens = np.array(prompt_token_ids(trace, index, cfg.block_size, cfg.hash_block_tokens))
        session = self.scheduler.add_session(index)
        params = SamplingParam(max_new_tokens=max(1, trace.output_tokens))
        meta = {"request_id": rid, "priority": trace.priority}
        meta.update(request_metadata(trace))
        if self.runtime is None:
            session.add_sequence(tokens, sampling_param=params).meta = meta
            return
        seq = session.add_sequence(tokens, sampling_param=params, schedkit_meta=meta)
        reason = self.runtime.rejection(seq)
        if reason is not None:
            self.outcome.rejected[rid] = reason
            self._end(index, "rejected")

    def _end(self, session_id: int, reason: str) -> None:
        self.scheduler.end_session(session_id)
        self.outcome.finished[self.rid_of[session_id]] = reason

    # -- steps -------------------------------------------------------------------------

    def step(self) -> None:
        """The engine loop's next forward: what it schedules and preempts is recorded,
        then the batch runs; with nothing to run the clock skips to the next arrival."""
        loop, running = self.loop, self.running_status
        before = [s for s in loop.running if s.status == running]
        kind, batch, invalid, chunk = loop.next_forward()
        if invalid:  # preempt_invalid_decode_seqs (after the step in the real loop)
            self.scheduler.preempt_seqs(invalid)
        preempted = sorted(self.rid_of[s.session_id] for s in before if s.status != running)
        if not batch and not preempted:
            if not self.traces:
                raise AssertionError(f"lmdeploy: {self.scenario.name} stalled with sessions left")
            self.clock = max(self.clock, self.traces[0][1].arrival_s)  # idle until then
            return
        scheduled: dict[str, int] = {}
        for seq in batch:
            rid = self.rid_of[seq.session_id]
            scheduled[rid] = chunk or (1 if kind == "decode" else int(seq.num_token_ids))
            if rid not in self.outcome.admitted:
                self.outcome.admitted.append(rid)
        self.outcome.steps.append(scheduled)
        self.outcome.preempted.append(preempted)
        if batch:
            self._run(kind, batch, chunk)

    def _run(self, kind: str, batch: list[Any], chunk: int) -> None:
        """Dispatch ``batch`` and fabricate its forward: a long prompt's chunk moves the
        prompt on, any other forward samples one token per running sequence; sessions
        whose last token came end."""
        scheduler, loop = self.scheduler, self.loop
        scheduler.activate_seqs(batch)
        scheduler.tick()
        loop.last_kind = kind
        self.clock += self.scenario.step_s
        if kind == "long_context_chunk":  # no token: the prompt moves on by a chunk
            batch[0].set_step(int(batch[0].num_history_ids) + chunk)
            return
        done = self._sample(kind, batch)
        loop.running = batch if kind == "decode" else [*loop.running, *batch]
        for session_id in done:  # the client has its last token: the session ends
            self._end(session_id, "length")
        loop.running = [s for s in loop.running if s.session_id in scheduler.sessions]
        if self.conserve:
            check_blocks(scheduler, self.cfg.num_blocks)

    def _sample(self, kind: str, batch: list[Any]) -> list[int]:
        """One token for each running sequence of ``batch`` (``ARSequenceStrategy
        .update_running``); returns the sessions that reached their ``max_new_tokens``."""
        import numpy as np
        from lmdeploy.pytorch.messages import UpdateTokenMode

        mode = UpdateTokenMode.DECODE if kind == "decode" else UpdateTokenMode.PREFILL
        done = []
        for seq in batch:
            if seq.status != self.running_status:
                continue
            rid = self.rid_of[seq.session_id]
            token = output_token_id(self.index_of[rid], int(seq.num_new_tokens)) & 0x7FFFFFFF
            seq.update_token_ids(np.array([token]), mode=mode)
            self.outcome.output_tokens[rid] = self.outcome.output_tokens.get(rid, 0) + 1
            if seq.num_new_tokens >= seq.sampling_param.max_new_tokens:
                seq.state.finish()
                done.append(seq.session_id)
        return done

    def finish(self) -> Outcome:
        """The outcome once every session ended: open reports closed, leaked blocks and
        policy errors counted."""
        scheduler, cfg, outcome = self.scheduler, self.cfg, self.outcome
        if self.runtime is not None:
            self.runtime.report_open()
        free = int(scheduler.block_manager.get_num_free_gpu_blocks())
        outcome.blocks_leaked = cfg.num_blocks - free - cached_only_blocks(scheduler)
        outcome.policy_errors = self.runtime.policy_errors if self.runtime is not None else 0
        return outcome


def contract_engines(model: Path | None = None) -> list[ContractEngine]:
    """LMDeploy's scheduler for ``schedkit contract`` (entry point ``schedkit.contract``),
    model-less (``model`` is not used), compared by outcomes: LMDeploy runs prefill and
    decode as separate forwards. Partial, as the capability matrix says: the admission
    order among prompts within ``max_prefill_token_num`` only (longer prompts wait for
    LMDeploy's turn for long work), and not where it differs for a policy reading waits
    or learning from step reports (LMDeploy's clock runs per forward); victims where
    LMDeploy shows the victim hook the request needing room and the running requests the
    simulator shows."""
    from schedkit.testing.contract_run import (
        ContractEngine,
        Relaxed,
        admission_order_of,
        fresh,
        order_unless_time_bound,
        victims_where_shown_alike,
    )

    def run(scenario: Scenario, config: SchedkitConfig) -> Outcome:
        return run_lmdeploy(scenario, fresh(config))

    short_first = admission_order_of(
        _short_prompts, "longer than max_prefill_token_num: they wait for LMDeploy's long turn"
    )
    order = order_unless_time_bound(
        short_first,
        "LMDeploy's clock and step reports advance per forward, prefill and decode apart",
    )

    return [
        ContractEngine(
            "lmdeploy",
            run,
            "lmdeploy",
            partial={
                "order_waiting": Relaxed(order, "order_waiting"),
                "select_victims": Relaxed(victims_where_shown_alike, "select_victims"),
            },
            note="prefill, decode and each chunk of a long prompt are separate forwards,"
            " so batches are not the simulator's (not compared)",
        )
    ]


def _short_prompts(scenario: Scenario) -> set[str]:
    budget = scenario.config.max_num_batched_tokens
    return {r.request_id for r in scenario.requests if r.prompt_tokens <= budget}
