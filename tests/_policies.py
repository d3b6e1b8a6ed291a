"""Policies and builders shared by the core tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from schedkit import BlockState, Policy, PolicyOptions, RequestState, hookimpl


def make_requests(n: int, **fields: Any) -> list[RequestState]:
    """``n`` requests r0..r(n-1), arriving one second apart."""
    return [
        RequestState(
            f"r{i}", num_prompt_tokens=100 + i, max_tokens=16, arrival_time=float(i), **fields
        )
        for i in range(n)
    ]


def make_blocks(n: int) -> list[BlockState]:
    return [BlockState(block_hash=1000 + i, depth=i % 4, last_access=float(i)) for i in range(n)]


# -- a policy that answers whatever a test tells it to -------------------------------


class Scripted(Policy):
    """Implements the hooks it is given answers for; records every call.

    An answer is a value to return, or a callable receiving the hook's arguments.
    """

    def __init__(self, **answers: Any) -> None:
        super().__init__()
        self.answers = answers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def reply(self, hook: str, *args: Any) -> Any:
        self.calls.append((hook, args))
        answer = self.answers[hook]
        return answer(*args) if callable(answer) else answer

    def calls_to(self, hook: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == hook]


def _admit_request(self: Scripted, request: Any, engine: Any) -> Any:
    return self.reply("admit_request", request, engine)


def _order_waiting(self: Scripted, waiting: Any, engine: Any) -> Any:
    return self.reply("order_waiting", waiting, engine)


def _plan_batch(self: Scripted, engine: Any, default: Any) -> Any:
    return self.reply("plan_batch", engine, default)


def _select_victims(self: Scripted, running: Any, needing: Any, engine: Any) -> Any:
    return self.reply("select_victims", running, needing, engine)


def _select_evictions(self: Scripted, candidates: Any, num_blocks: Any, engine: Any) -> Any:
    return self.reply("select_evictions", candidates, num_blocks, engine)


def _route_request(self: Scripted, request: Any, replicas: Any) -> Any:
    return self.reply("route_request", request, replicas)


def _waiting_key(self: Scripted, request: Any, engine: Any) -> Any:
    return self.reply("waiting_key", request, engine)


def _victim_key(self: Scripted, request: Any, engine: Any) -> Any:
    return self.reply("victim_key", request, engine)


def _eviction_key(self: Scripted, block: Any, engine: Any) -> Any:
    return self.reply("eviction_key", block, engine)


def _on_request_arrived(self: Scripted, request: Any, engine: Any) -> Any:
    return self.reply("on_request_arrived", request, engine)


def _on_step_finished(self: Scripted, report: Any, engine: Any) -> Any:
    return self.reply("on_step_finished", report, engine)


def _on_request_finished(self: Scripted, request: Any, reason: Any, engine: Any) -> Any:
    return self.reply("on_request_finished", request, reason, engine)


_IMPLS: dict[str, Callable[..., Any]] = {
    fn.__name__[1:]: fn
    for fn in (
        _admit_request,
        _order_waiting,
        _plan_batch,
        _select_victims,
        _select_evictions,
        _route_request,
        _waiting_key,
        _victim_key,
        _eviction_key,
        _on_request_arrived,
        _on_step_finished,
        _on_request_finished,
    )
}


def scripted(**answers: Any) -> Scripted:
    """A ``Scripted`` policy implementing exactly the hooks named in ``answers``."""
    body = {hook: hookimpl(_IMPLS[hook]) for hook in answers}
    cls = type(f"Scripted[{','.join(answers)}]", (Scripted,), body)
    return cls(**answers)  # type: ignore[no-any-return]


def raising(exc: Exception) -> Callable[..., Any]:
    """An answer that raises ``exc``."""

    def answer(*args: Any) -> Any:
        raise exc

    return answer


# -- a module-level policy with bounded options, for config tests --------------------


class Bounded(Policy):
    """Implements nothing; exists to have options with bounds."""

    class Options(PolicyOptions):
        max_waiting: int = Field(default=8, ge=1, le=1000)
        label: str = "x"


class NotAPolicy:
    """Has no ``Options``: loading it as a policy must fail."""
