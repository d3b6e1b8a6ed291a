"""schedkit-example: serve the waiting request with the least prompt left first.

A template for policy plugins: one policy class, its options model, one hook. The entry
point ``shortest-prompt`` in group ``schedkit.policies`` (see ``pyproject.toml``) names
``ShortestPromptFirst``; schedkit instantiates it with validated options when a config
selects it.
"""

from __future__ import annotations

from collections.abc import Sequence

import schedkit
from pydantic import Field
from schedkit import EngineView, RequestView, hookimpl

__all__ = ["ShortestPromptFirst", "remaining_prompt"]


def remaining_prompt(request: RequestView) -> int:
    """Prompt tokens the request still has to prefill."""
    return request.num_prompt_tokens - request.num_computed_tokens


def _shortest_first(request: RequestView) -> tuple[int, float]:
    return (remaining_prompt(request), request.arrival_time)


def _arrival(request: RequestView) -> float:
    return request.arrival_time


class ShortestPromptFirst(schedkit.Policy):
    """Order the waiting queue by remaining prompt tokens, shortest first; ties by arrival.

    Short prompts reach their first token sooner, which lowers mean time to first token,
    but a steady stream of short prompts can starve a long one. ``max_wait_s`` bounds
    that: requests that have waited at least that long go first, oldest first.
    """

    class Options(schedkit.PolicyOptions):
        max_wait_s: float | None = Field(
            default=None,
            gt=0,
            le=3600,
            description=(
                "Seconds (engine clock minus arrival) after which a waiting request is"
                " served before any shorter one, oldest first; None: never."
            ),
        )

    options: Options

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        max_wait = self.options.max_wait_s
        if max_wait is None:
            return sorted(waiting, key=_shortest_first)
        overdue = [r for r in waiting if engine.clock - r.arrival_time >= max_wait]
        others = [r for r in waiting if engine.clock - r.arrival_time < max_wait]
        return sorted(overdue, key=_arrival) + sorted(others, key=_shortest_first)
