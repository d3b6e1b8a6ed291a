"""Prefill work queued in the engine, per request, with each request's TTFT deadline."""

from __future__ import annotations

from schedkit import RequestView

__all__ = ["Backlog", "prefill_left"]


def prefill_left(request: RequestView) -> int:
    """Tokens the request must still prefill before its next token.

    Its prompt plus, after a preemption by recompute, its output so far, less what is
    computed. A decoding request has exactly one token left, its next one: that is decode
    work, not prefill, so it counts as 0.
    """
    left = request.num_prompt_tokens + request.num_output_tokens - request.num_computed_tokens
    return left if left > 1 else 0


class Backlog:
    """Requests that still have prefill to do, with their deadlines (engine seconds).

    Fed by the policy's hooks: a request enters when admitted (or when first seen
    prefilling or preempted), its work shrinks as steps compute it, and it leaves once
    its prefill is done or it finishes. Deadlines order requests as EDF serves them, so
    ``ahead(d)`` is the work an EDF engine does before a request with deadline ``d``.

    Bounded by the requests in the engine: an entry leaves when its prefill is done, when
    the request finishes (reported once per request) and, for any the hooks missed, when
    the engine is idle (``DeadlineAware`` clears it). Nothing is kept per tenant.
    """

    def __init__(self) -> None:
        self._work: dict[str, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._work)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._work

    def set(self, request_id: str, deadline: float, tokens: int) -> None:
        """Record ``tokens`` of prefill left for the request; 0 removes it."""
        if tokens > 0:
            self._work[request_id] = (deadline, tokens)
        else:
            self._work.pop(request_id, None)

    def update(self, request_id: str, tokens: int) -> None:
        """New prefill left for a tracked request (untracked ones are ignored)."""
        entry = self._work.get(request_id)
        if entry is not None:
            self.set(request_id, entry[0], tokens)

    def remove(self, request_id: str) -> None:
        self._work.pop(request_id, None)

    def clear(self) -> None:
        self._work.clear()

    def ahead(self, deadline: float) -> int:
        """Prefill tokens of tracked requests whose deadline is not later than ``deadline``."""
        return sum(tokens for d, tokens in self._work.values() if d <= deadline)

    def total(self) -> int:
        return sum(tokens for _, tokens in self._work.values())
