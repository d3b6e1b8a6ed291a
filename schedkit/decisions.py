"""Values that hooks return or receive besides the views."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schedkit.views import RequestView


@dataclass(frozen=True, slots=True)
class Admission:
    """Answer of ``admit_request``: admit, or reject with a reason the client sees.

    ``reason`` is free text for the client (it may quote the request's numbers);
    ``code`` is a stable name for the kind of rejection (``[a-z0-9_]``, up to 40
    characters, e.g. ``"slo_ttft"``), the label metrics count by. Without a code, metrics
    count by the reason with its numbers replaced by ``N``, and at most
    ``schedkit.prometheus.MAX_REASON_LABELS`` distinct labels per policy.
    """

    admitted: bool
    reason: str = ""
    code: str = ""

    @classmethod
    def admit(cls) -> Admission:
        return ADMIT

    @classmethod
    def reject(cls, reason: str, code: str = "") -> Admission:
        return cls(False, reason, code)


ADMIT = Admission(True)


@dataclass(frozen=True, slots=True)
class BatchBudget:
    """Limits for one scheduling step.

    ``token_budget`` caps the tokens scheduled in the step (vLLM's
    ``max_num_batched_tokens``), ``max_running`` the requests running at once
    (``max_num_seqs``), ``prefill_chunk`` the tokens one request may prefill in the step
    while another request is running or waiting (vLLM's ``long_prefill_token_threshold``,
    which a request alone may exceed up to the token budget; 0 = no cap beyond it).
    """

    token_budget: int
    max_running: int
    prefill_chunk: int = 0


@dataclass(slots=True)
class StepReport:
    """What one engine step (or a run of identical decode steps) did.

    ``scheduled`` and ``num_scheduled_tokens`` are parallel: the tokens each request
    computed over the ``num_steps`` steps covered. ``duration_s`` is measured on the
    engine clock (``EngineView.clock``): modelled time in the simulator.
    """

    num_steps: int
    duration_s: float
    num_prefill_tokens: int
    num_decode_tokens: int
    scheduled: Sequence[RequestView] = field(default_factory=tuple)
    num_scheduled_tokens: Sequence[int] = field(default_factory=tuple)
    preempted: Sequence[RequestView] = field(default_factory=tuple)


FINISH_REASONS = ("stop", "length", "rejected", "aborted")
