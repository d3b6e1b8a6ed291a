"""What each engine honours of every hook: the capability matrix.

One meaning per hook is the contract (``docs/hooks.md``). Where an engine cannot honour
it exactly, the entry here is ``partial`` and says what differs; ``docs/hooks.md`` shows
this table (``tests/test_capabilities.py`` fails when the two disagree), the adapters call
``warn_unsupported`` when they start, and the bench warns before a run. Units are the
same everywhere unless an entry says otherwise: seconds on the engine's clock, tokens,
and KV blocks of the engine's block size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from schedkit.hookspecs import HOOK_NAMES

__all__ = [
    "ENGINES",
    "MATRIX",
    "Capability",
    "differences",
    "matrix_engine",
    "render_markdown",
    "warn_unsupported",
]

log = logging.getLogger("schedkit")

Level = Literal["full", "partial", "none"]
ENGINES = ("sim", "vllm", "sglang")


@dataclass(frozen=True, slots=True)
class Capability:
    level: Level
    note: str = ""


FULL = Capability("full")

MATRIX: dict[str, dict[str, Capability]] = {
    "on_request_arrived": {"sim": FULL, "vllm": FULL, "sglang": FULL},
    "admit_request": {
        "sim": FULL,
        "vllm": Capability(
            "full", "a rejected request ends with finish_reason abort, stop_reason 'rejected: …'"
        ),
        "sglang": Capability("full", "a rejected request is answered HTTP 503 'rejected: …'"),
    },
    "order_waiting": {
        "sim": FULL,
        "vllm": Capability(
            "full", "requests holding KV blocks of a KV connector keep vLLM's order, first"
        ),
        "sglang": Capability("full", "called before each prefill batch is formed"),
    },
    "plan_batch": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability(
            "partial",
            "token_budget and prefill_chunk cap prefill batches only; SGLang runs every"
            " running request in each decode batch, so decode steps are not capped;"
            " max_running caps admissions",
        ),
    },
    "select_victims": {
        "sim": FULL,
        "vllm": Capability(
            "full", "a victim vLLM already scheduled this step is unscheduled, as the simulator"
        ),
        "sglang": Capability(
            "partial",
            "decode retraction frees memory for the whole decode batch: `needing` is the"
            " request SGLang would keep longest; with --enable-priority-scheduling SGLang's"
            " preemption threshold still decides who may be preempted",
        ),
    },
    "select_evictions": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability(
            "partial",
            "candidates are radix-tree leaves (a run of tokens, not one block), all of"
            " them (no window); num_blocks counts leaves; last_access is SGLang's logical"
            " access counter (order only, not seconds); depth counts tree nodes; needs"
            " --radix-cache-backend schedkit",
        ),
    },
    "on_step_finished": {
        "sim": Capability("full", "a run of identical decode steps may come as one report"),
        "vllm": Capability("full", "with async scheduling, after the step's results arrive"),
        "sglang": Capability("full", "prefill and decode batches are separate steps"),
    },
    "on_request_finished": {"sim": FULL, "vllm": FULL, "sglang": FULL},
}
assert set(MATRIX) == set(HOOK_NAMES), "every hook has a row"


def matrix_engine(engine: str) -> str:
    """The matrix column of a bench engine name (``vllm-twin`` runs vLLM's scheduler)."""
    return "vllm" if engine.startswith("vllm") else engine


def differences(hooks: Iterable[str], engine: str) -> list[tuple[str, Capability]]:
    """The hooks among ``hooks`` that ``engine`` does not honour fully."""
    if engine not in ENGINES:
        return []
    return [(h, MATRIX[h][engine]) for h in sorted(hooks) if MATRIX[h][engine].level != "full"]


def warn_unsupported(facade: object, engine: str) -> list[str]:
    """Log one warning per hook the selected policies implement that ``engine`` honours
    only in part; returns the messages. ``facade``: a ``PolicyFacade``."""
    label = getattr(facade, "label", "?")
    implemented: frozenset[str] = getattr(facade, "implemented", frozenset())
    messages = [
        f"schedkit: policy {label!r} uses {hook}, which {engine} supports only in part:"
        f" {cap.note} (docs/hooks.md, capability matrix)"
        for hook, cap in differences(implemented, engine)
    ]
    for message in messages:
        log.warning("%s", message)
    return messages


def render_markdown() -> str:
    """The matrix as the Markdown table ``docs/hooks.md`` shows."""
    lines = [
        "| hook | " + " | ".join(ENGINES) + " |",
        "|---|" + "---|" * len(ENGINES),
    ]
    for hook in HOOK_NAMES:
        cells = []
        for engine in ENGINES:
            cap = MATRIX[hook][engine]
            cells.append(cap.level + (f": {cap.note}" if cap.note else ""))
        lines.append(f"| `{hook}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)
