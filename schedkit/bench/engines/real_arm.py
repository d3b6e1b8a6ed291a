"""``RealArm``: what every real-engine bench arm does besides driving its engine.

``schedkit bench --engine E --model DIR`` runs each arm on a fresh in-process engine E
(the adapter's ``RealEngine``, a ``RealArm``), submits each request of the workload when
the wall clock reaches its (scaled) arrival time, and waits until every request has
ended. The result is the simulator's ``RunResult``, so metrics and reports mean the same.
What every engine does the same way lives here; the adapter adds how it builds the engine,
submits a request and reads its outputs (see its ``real.py``).

- Traces are replayed in arrival order (a stable sort, as the simulator). Requests longer
  than the model's ``max_position_embeddings`` are clipped (prompt first, ``fit_traces``),
  warned about and counted in ``results.json`` under ``engine.real.clipped_requests``.
- Prompts are token ids (the engine skips its tokenizer) built as for every engine
  (``schedkit.bench.engines.requests``), mixed into the model's vocabulary; shared prefixes stay
  shared. Records start as the simulator starts them.
- Times are seconds from the start of the replay (``time.perf_counter``) on this machine,
  so ``results.json`` names no simulated GPU or cost model (``engine.real.clock`` is
  ``"wall"``). ``arrival_s`` is the trace's arrival time; the delay until the replay
  submits a request counts toward its TTFT, as it would for a client.
- A request whose prompt + ``max_tokens`` needs more KV blocks than the engine has is
  rejected before submission, with the simulator's reason (``fits_kv``): the engine would
  hold it waiting forever.
- A request the policy rejects ends as an abort whose message is ``"rejected: why"`` (the
  adapter's admission decision); it counts as rejected for ``why`` (``end``). Other aborts
  are ``aborted``.
- ``first_token_s``, each later token (one inter-token gap per token) and ``finish_s``:
  when the replay received the output carrying it. Several tokens in one output count
  with no gap between them (``record_tokens``).

Keep workloads for real engines small: every token is really computed.
"""

from __future__ import annotations

import abc
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from schedkit.adapter.runtime import REJECTED
from schedkit.bench.engines.requests import (
    ModelInfo,
    fit_traces,
    model_info,
    new_record,
    prompt_token_ids,
)
from schedkit.facade import PolicyFacade
from schedkit.records import RequestRecord, RunResult
from schedkit.sim.recorder import Recorder

if TYPE_CHECKING:
    from schedkit.bench.spec import PreparedBench

__all__ = ["RealArm"]


class RealArm(abc.ABC):
    """One replay of the bench's workload on a fresh real engine with arm ``index``.

    A subclass names its engine (``engine_name``, as ``--engine`` spells it), builds the
    engine (in ``__init__`` after this one's, or in ``run``), replays in ``run`` and frees
    the engine in ``close``. ``block_size`` is the engine's KV block size when it differs
    from the bench's ``--block-size``; prompts share prefixes in whole blocks of it.
    ``facade`` names the arm and supplies the policy error counts of the result; an engine
    that runs the policies in this process replaces it with the one they run in.
    """

    engine_name: ClassVar[str]

    def __init__(
        self,
        bench: PreparedBench,
        index: int,
        rate_scale: float,
        info: ModelInfo,
        *,
        block_size: int | None = None,
    ) -> None:
        cfg = bench.sim_config
        self.bench, self.index, self.info = bench, index, info
        self.log = logging.getLogger(f"schedkit.{self.engine_name}")
        self.block_size = cfg.block_size if block_size is None else block_size
        traces = sorted(bench.workload(rate_scale).requests, key=lambda r: r.arrival_s)
        self.max_model_len, self.traces, clipped = fit_traces(traces, info.max_positions)
        if clipped:
            self.log.warning(
                "--engine %s: %d of %d requests clipped to the model's %d positions",
                self.engine_name,
                clipped,
                len(traces),
                info.max_positions,
            )
        self.records = [new_record(t) for t in self.traces]
        self.prompts = [
            prompt_token_ids(t, i, self.block_size, cfg.hash_block_tokens, info.vocab_size)
            for i, t in enumerate(self.traces)
        ]
        self.facade = PolicyFacade.from_config(bench.configs[index])
        self.result = RunResult(policy=self.facade.label, records=self.records, duration_s=0.0)
        self.recorder = Recorder(self.result, cfg.timeline_interval_s)
        # Timed by the wall clock on this machine: the simulated GPU and cost model do not apply.
        bench.engine_info["gpu"] = "this machine (wall clock)"
        bench.engine_info.pop("cost_model", None)
        self.real_info: dict[str, Any] = {
            "model_dir": str(info.path),
            "max_model_len": self.max_model_len,
            "clipped_requests": clipped,
            "clock": "wall",
        }
        bench.engine_info["real"] = self.real_info  # the engine adds its own keys
        self.started = 0.0  # time.perf_counter() at the start of the replay

    @classmethod
    def run_arm(cls, bench: PreparedBench, index: int, rate_scale: float) -> RunResult:
        """One arm on the engine: the ``schedkit.engines`` entry point's body. The engine
        is closed however the replay ends."""
        arm = cls(bench, index, rate_scale, model_info(bench.spec.settings.model, cls.engine_name))
        try:
            return arm.run()
        finally:
            arm.close()

    @abc.abstractmethod
    def run(self) -> RunResult:
        """Replay every request; return ``finish_run``'s result."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free the engine before the next arm builds one; safe to call more than once."""

    # -- what the replay records -------------------------------------------------------

    def clock(self) -> float:
        """Seconds since the start of the replay."""
        return time.perf_counter() - self.started

    def fits_kv(self, rec: RequestRecord, capacity_blocks: int) -> bool:
        """Whether ``rec`` can ever fit a KV cache of ``capacity_blocks`` blocks; if not it
        is rejected, as the simulator rejects it."""
        need = -(-(rec.prompt_tokens + rec.max_tokens) // self.block_size)
        if need <= capacity_blocks:
            return True
        self.reject(
            rec, f"prompt + max_tokens need {need} KV blocks, capacity is {capacity_blocks}"
        )
        return False

    def record_tokens(self, rec: RequestRecord, tokens: int, clock: float) -> int:
        """``rec`` has ``tokens`` output tokens in all at ``clock``: record the new ones and
        return how many there are. The first token sets ``first_token_s``; every later one
        is one inter-token gap: the time since the previous output for the first new token,
        0 for the others (they came in one output). ``finish_s`` holds the time of the last
        token until the request ends."""
        new = tokens - rec.output_tokens
        if new <= 0:
            return 0
        if rec.first_token_s is None:
            rec.first_token_s = clock
        else:
            last = rec.finish_s if rec.finish_s is not None else rec.first_token_s
            self.recorder.token_gap(clock - last, 1)
        if new > 1:
            self.recorder.token_gap(0.0, new - 1)
        rec.output_tokens = tokens
        rec.finish_s = clock
        return new

    def end(self, rec: RequestRecord, reason: str, message: object, clock: float) -> bool:
        """End ``rec`` at ``clock`` with the engine's finish ``reason`` (``"abort"`` ends it
        as ``aborted``); an abort whose ``message`` is ``"rejected: why"`` is a rejection for
        ``why`` instead. Return whether it finished (``False``: rejected)."""
        prefix = f"{REJECTED}:"
        if reason == "abort" and isinstance(message, str) and message.startswith(prefix):
            self.reject(rec, message.removeprefix(prefix).strip() or REJECTED)
            return False
        rec.finish_reason = "aborted" if reason == "abort" else reason
        rec.finish_s = clock
        return True

    def reject(self, rec: RequestRecord, reason: str) -> None:
        """``rec`` was rejected for ``reason``: no token, no finish time, counted by reason."""
        rec.finish_reason, rec.reject_reason, rec.finish_s = "rejected", reason, None
        rec.first_token_s = rec.scheduled_s = None
        rej = self.result.rejections
        rej[reason] = rej.get(reason, 0) + 1

    def finish_run(self, end: float, steps: int) -> RunResult:
        """The result, lasting until the last request finished (``end``, seconds into the
        replay, if none did), with the recorder's gaps, KV usage and the facade's errors."""
        duration = max((r.finish_s or 0.0 for r in self.records), default=0.0) or end
        return self.recorder.finish(duration, steps, self.facade, self.started)


def __getattr__(name: str) -> object:
    """``ReplayArm``, renamed ``RealArm`` (issue #36): "replay" names running a workload
    through an engine, not the class."""
    if name == "ReplayArm":
        import warnings

        warnings.warn(
            "schedkit.bench.engines.real_arm.ReplayArm is now RealArm; use the new name (the old one"
            " goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return RealArm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
