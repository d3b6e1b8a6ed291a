"""The contract suite's vLLM driver: a scenario through vLLM's real scheduler, model-less.

``run_vllm`` drives ``schedkit_vllm.Scheduler`` or ``AsyncScheduler`` the way vLLM's
``EngineCore`` does: with ``batch_queue=1`` as ``EngineCore.step`` (schedule, execute,
update), with ``batch_queue=2`` as ``EngineCore.step_with_batch_queue`` under async
scheduling, where ``schedule()`` for step N+1 runs before ``update_from_output`` of step
N. The fabricated model output samples one token for every scheduled request that vLLM
did not mark a prefill chunk when it scheduled it (what a worker returns), and aborts
listed in ``aborts`` (step index -> request ids) land just before the update that
follows that step, as ``_process_aborts_queue`` runs them. ``policies=None`` drives the
class as built (vLLM's own classes: stock vLLM, for equivalence checks). Every step
lasts ``scenario.step_s`` on the engine clock the policies see, as on the simulator.
``probe``, when given, is called with the scheduler once its policies are installed and
before any request arrives, to count what an ``Outcome`` does not record (the chaos test
counts vLLM's prefix-cache evictions and hits).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from schedkit.bench.engines.requests import new_record
from schedkit.config import SchedkitConfig
from schedkit.policy import Policy
from schedkit.sim.config import SimConfig
from schedkit.testing.contract import Outcome, Scenario, facade_of
from schedkit.testing.contract_run import ContractEngine
from schedkit.workload import TraceRequest

from schedkit_vllm.harness.modelless import build_for, model_runner_output

__all__ = ["run_vllm", "run_vllm_engine"]

_EPS = 1e-9


def run_vllm(
    scenario: Scenario,
    policies: Sequence[tuple[str, Policy]] | None,
    *,
    cls: type | None = None,
    batch_queue: int = 1,
    aborts: Mapping[int, Sequence[str]] | None = None,
    max_steps: int = 20_000,
    probe: Callable[[Any], None] | None = None,
) -> Outcome:
    name = "vllm" if batch_queue == 1 else f"vllm-batch-queue-{batch_queue}"
    if cls is not None:
        name += f"[{cls.__name__}]"
    outcome = Outcome(name, batches_comparable=batch_queue == 1)
    scheduler = build_for(scenario.config, scenario.requests, cls=cls)
    replay = _SchedulerReplay(scenario, scheduler, outcome, aborts or {})
    runtime = None  # policies=None: the scheduler as built (stock vLLM for vLLM's classes)
    if policies is not None:
        runtime = scheduler.install_schedkit(facade_of(policies, outcome.recorder))
        runtime.engine.use_clock(lambda: replay.clock)
    if probe is not None:
        probe(scheduler)
    pool = scheduler.kv_cache_manager.block_pool
    free_at_start = pool.get_num_free_blocks()
    if not replay.run(batch_queue, max_steps):
        raise AssertionError(f"{name}: {scenario.name} still busy after {max_steps} steps")
    outcome.blocks_leaked = free_at_start - pool.get_num_free_blocks()
    outcome.policy_errors = runtime.policy_errors if runtime is not None else 0
    return outcome


class _SchedulerReplay:
    """``scenario``'s requests through a model-less ``scheduler``, stepped as
    ``EngineCore`` steps it, into ``outcome``; ``clock`` is the engine clock."""

    def __init__(
        self,
        scenario: Scenario,
        scheduler: Any,
        outcome: Outcome,
        aborts: Mapping[int, Sequence[str]],
    ) -> None:
        self.scenario = scenario
        self.scheduler = scheduler
        self.outcome = outcome
        self.aborts = aborts
        self.clock = 0.0
        traces = sorted(scenario.requests, key=lambda r: r.arrival_s)
        self.pending = deque(enumerate(traces))
        self.queue: deque[tuple[int, Any, Any]] = deque()  # (step, SchedulerOutput, model output)
        self.steps = 0

    def run(self, batch_queue: int, max_steps: int) -> bool:
        """Step until every request has ended (True) or ``max_steps`` ran out (False);
        up to ``batch_queue`` scheduled steps wait for their update."""
        scheduler, queue = self.scheduler, self.queue
        for _ in range(max_steps):
            self.arrive()
            if not self.pending and not scheduler.has_requests() and not queue:
                return True
            if not scheduler.has_requests() and not queue:
                self.clock = self.pending[0][1].arrival_s  # idle until the next arrival
                continue
            if len(queue) < batch_queue and scheduler.has_requests():
                scheduled = self.schedule()
                if len(queue) < batch_queue and (scheduled or scheduler.has_requests()):
                    continue  # fill the batch queue before waiting on a result
            self.update(*queue.pop())
        return False

    def arrive(self) -> None:
        """Add the requests that have arrived by now."""
        from schedkit_vllm.harness.twin import _make_request

        while self.pending and self.pending[0][1].arrival_s <= self.clock + _EPS:
            index, trace = self.pending.popleft()
            request = _make_request(trace, index, new_record(trace), self.scenario.config)
            self.scheduler.add_request(request)

    def schedule(self) -> dict[str, int]:
        """One ``schedule()``, queued with the model output a worker would return: one
        token for every request vLLM did not mark a prefill chunk. Its scheduled tokens."""
        output = self.scheduler.schedule()
        scheduled = _record_schedule(self.outcome, output)
        ids = list(scheduled)
        requests = self.scheduler.requests
        sampled = [[] if requests[rid].is_prefill_chunk else [7] for rid in ids]
        model_output = model_runner_output(ids, sampled)
        self.queue.appendleft((self.steps, output, model_output))
        self.steps += 1
        if scheduled:
            self.clock += self.scenario.step_s
        return scheduled

    def update(self, step: int, output: Any, model_output: Any) -> None:
        """``update_from_output`` of ``step``, after the aborts listed for it."""
        from vllm.v1.request import RequestStatus

        scheduler, outcome = self.scheduler, self.outcome
        if step in self.aborts:  # a client abort gets no engine output: it ends here
            live = [rid for rid in self.aborts[step] if rid in scheduler.requests]
            scheduler.finish_requests(live, RequestStatus.FINISHED_ABORTED)
            outcome.finished.update(dict.fromkeys(live, "aborted"))
        engine_outputs = scheduler.update_from_output(output, model_output)
        for bundle in engine_outputs.values():
            for out in bundle.outputs:
                rid = out.request_id
                outcome.output_tokens[rid] = outcome.output_tokens.get(rid, 0) + len(
                    out.new_token_ids
                )
                if out.finish_reason is not None:
                    _finished(outcome, rid, out.finish_reason, out.stop_reason)


def _record_schedule(outcome: Outcome, output: Any) -> dict[str, int]:
    """Record a ``SchedulerOutput``'s batch, victims and first admissions in ``outcome``;
    its ``{request id: tokens}``."""
    scheduled: dict[str, int] = dict(output.num_scheduled_tokens)
    if scheduled or output.preempted_req_ids:
        outcome.steps.append(scheduled)
        outcome.preempted.append(sorted(output.preempted_req_ids))
    for new in output.scheduled_new_reqs:
        if new.req_id not in outcome.admitted:
            outcome.admitted.append(new.req_id)
    return scheduled


def run_vllm_engine(
    scenario: Scenario,
    policies: Sequence[tuple[str, Policy]],
    model_dir: Any,
    *,
    vocab_size: int,
    max_model_len: int = 512,
) -> Outcome:
    """``scenario`` through a real in-process vLLM engine (``LLM``, a tiny model, the
    engine core in this process), one ``LLMEngine.step()`` per step: the real model
    samples the tokens, vLLM's own output processing ends the requests."""
    outcome = Outcome("vllm-engine")
    llm = _in_process_llm(scenario.config, model_dir, max_model_len)
    engine = llm.llm_engine
    scheduler = engine.engine_core.engine_core.scheduler
    clock = [0.0]
    runtime = scheduler.install_schedkit(facade_of(policies, outcome.recorder))
    runtime.engine.use_clock(lambda: clock[0])
    pool = scheduler.kv_cache_manager.block_pool
    free_at_start = pool.get_num_free_blocks()
    scheduler.schedule = _recording(scheduler.schedule, outcome, clock, scenario.step_s)
    _replay_on_engine(engine, scenario, outcome, clock, vocab_size)
    outcome.blocks_leaked = free_at_start - pool.get_num_free_blocks()
    outcome.policy_errors = runtime.policy_errors
    del llm
    _to_client_ids(outcome, {r.request_id for r in scenario.requests})
    return outcome


def _in_process_llm(cfg: SimConfig, model_dir: Any, max_model_len: int) -> Any:
    """A ``vllm.LLM`` on ``model_dir`` shaped like ``cfg``, its engine core in this
    process (the driver reads its scheduler), ``schedkit_vllm.Scheduler`` with no config."""
    import os

    from vllm import LLM

    # 1 GiB of CPU KV space is far more than the scenario's blocks, which
    # num_gpu_blocks_override sets.
    saved = {
        k: os.environ.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")
    }
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    try:
        return LLM(
            model=str(model_dir),
            dtype="bfloat16",
            enforce_eager=True,
            skip_tokenizer_init=True,
            # vLLM refuses a model length the KV cache cannot hold once.
            max_model_len=min(max_model_len, cfg.num_blocks * cfg.block_size),
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            long_prefill_token_threshold=cfg.long_prefill_token_threshold,
            block_size=cfg.block_size,
            num_gpu_blocks_override=cfg.num_blocks + 1,
            enable_prefix_caching=cfg.enable_prefix_caching,
            enable_chunked_prefill=True,
            async_scheduling=False,
            scheduler_cls="schedkit_vllm.Scheduler",  # no config: installed by the driver
            seed=0,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _recording(
    schedule: Callable[..., Any], outcome: Outcome, clock: list[float], step_s: float
) -> Callable[..., Any]:
    """``schedule``, recording each batch in ``outcome`` and advancing ``clock[0]`` by
    ``step_s`` for each step that scheduled tokens."""

    def recorded_schedule(*args: Any, **kwargs: Any) -> Any:
        output = schedule(*args, **kwargs)
        if _record_schedule(outcome, output):
            clock[0] += step_s
        return output

    return recorded_schedule


def _replay_on_engine(
    engine: Any, scenario: Scenario, outcome: Outcome, clock: list[float], vocab_size: int
) -> None:
    """Submit each request at its arrival on ``clock`` and step ``engine`` until all
    have finished, recording how each ended."""
    pending = deque(enumerate(sorted(scenario.requests, key=lambda r: r.arrival_s)))
    for _ in range(20_000):
        while pending and pending[0][1].arrival_s <= clock[0] + _EPS:
            index, trace = pending.popleft()
            _submit(engine, trace, index, scenario.config, vocab_size)
        if not engine.has_unfinished_requests():
            if not pending:
                break
            clock[0] = pending[0][1].arrival_s
            continue
        for out in engine.step():
            if not out.finished:
                continue
            completion = out.outputs[0]
            rid = out.request_id
            outcome.output_tokens[rid] = len(completion.token_ids)
            _finished(outcome, rid, completion.finish_reason, completion.stop_reason)


def _submit(engine: Any, trace: TraceRequest, index: int, cfg: SimConfig, vocab_size: int) -> None:
    """Add ``trace`` to ``engine`` as a token-id prompt within the model's vocabulary."""
    from schedkit.bench.engines.requests import in_vocab, prompt_token_ids, request_metadata
    from vllm import SamplingParams

    ids = prompt_token_ids(trace, index, cfg.block_size, cfg.hash_block_tokens)
    params = SamplingParams(
        max_tokens=trace.output_tokens,
        ignore_eos=True,
        detokenize=False,
        extra_args=request_metadata(trace),
    )
    engine.add_request(
        trace.request_id,
        {"prompt_token_ids": [in_vocab(t, vocab_size) for t in ids]},
        params,
        arrival_time=trace.arrival_s,  # on the driver's clock, which the engine view reads
        priority=trace.priority,
    )


def _finished(outcome: Outcome, rid: str, finish_reason: Any, stop_reason: Any) -> None:
    """Record how vLLM ended ``rid``: a schedkit rejection (``stop_reason`` "rejected:
    <reason>"), else vLLM's finish reason in schedkit's words."""
    if isinstance(stop_reason, str) and stop_reason.startswith("rejected: "):
        outcome.finished[rid] = "rejected"
        outcome.rejected[rid] = stop_reason.removeprefix("rejected: ")
    else:
        reason = str(finish_reason)
        outcome.finished[rid] = "aborted" if reason == "abort" else reason


def _to_client_ids(outcome: Outcome, ids: set[str]) -> None:
    """vLLM's engine makes request ids unique by appending ``-<8 hex>`` to the client's;
    the scheduler and the policies see those. Map them back for comparison."""

    def client(rid: str) -> str:
        if rid in ids:
            return rid
        head, _, _ = rid.rpartition("-")
        return head if head in ids else rid

    outcome.steps = [{client(k): v for k, v in step.items()} for step in outcome.steps]
    outcome.preempted = [sorted(map(client, step)) for step in outcome.preempted]
    outcome.admitted = [client(r) for r in outcome.admitted]
    rec = outcome.recorder
    for counter in (rec.arrived, rec.reported):
        items = list(counter.items())
        counter.clear()
        for k, v in items:
            counter[client(k)] += v
    rec.finished = {client(k): v for k, v in rec.finished.items()}
    rec.preempted = [client(r) for r in rec.preempted]
    rec.clocks = {client(k): v for k, v in rec.clocks.items()}
    rec.cached = {client(k): v for k, v in rec.cached.items()}
    rec.victim_calls = [
        (client(needing), [(client(r), n) for r, n in running])
        for needing, running in rec.victim_calls
    ]
    rec.drifted = [f"{client(d.partition(':')[0])}:{d.partition(':')[2]}" for d in rec.drifted]


def contract_engines(model: Path | None = None) -> list[ContractEngine]:
    """vLLM for ``schedkit contract`` (entry point ``schedkit.contract``): the synchronous
    scheduler, as the CPU engine runs it, step by step as the simulator; the
    AsyncScheduler under a batch queue of 2, as every GPU runs it; and with ``model`` (a
    model directory vLLM's CPU engine can run) the real in-process engine, which samples
    with the model, step by step too."""
    from schedkit.testing.contract_run import Relaxed, fresh, order_unless_learning_from_reports

    from schedkit_vllm import AsyncScheduler, Scheduler

    def sync(scenario: Scenario, config: SchedkitConfig) -> Outcome:
        return run_vllm(scenario, fresh(config), cls=Scheduler, batch_queue=1)

    def overlapped(scenario: Scenario, config: SchedkitConfig) -> Outcome:
        return run_vllm(scenario, fresh(config), cls=AsyncScheduler, batch_queue=2)

    engines = [
        ContractEngine("vllm", sync, "vllm", same_batches=True),
        ContractEngine(
            "vllm-async",
            overlapped,
            "vllm",
            partial={
                "order_waiting": Relaxed(order_unless_learning_from_reports, "on_step_finished")
            },
            note="the AsyncScheduler schedules a step while the last one runs, so its"
            " batches are not the simulator's step by step (not compared); admissions,"
            " victims, rejections, finishes and outputs are",
        ),
    ]
    if model is not None:
        engines.append(_real_engine(Path(model)))
    return engines


def _real_engine(model: Path) -> ContractEngine:
    from schedkit.bench.engines.requests import model_info
    from schedkit.testing.contract_run import fresh

    vocab = model_info(str(model), "vllm").vocab_size

    def real(scenario: Scenario, config: SchedkitConfig) -> Outcome:
        return run_vllm_engine(scenario, fresh(config), model, vocab_size=vocab)

    return ContractEngine("vllm-engine", real, "vllm", same_batches=True)
