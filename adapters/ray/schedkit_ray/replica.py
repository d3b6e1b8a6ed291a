"""``SimReplica``: the Ray Serve deployment that hosts one simulated engine.

Each replica runs a ``schedkit.simserver.SimServer`` (what ``schedkit serve sim``
serves) in its own event loop. ``__call__(body=..., tenant=..., chat=...)`` is a
streaming method: its first item is a head (``ReplyHead``: HTTP status, whether the
body is server-sent events, this replica's id), then the body's bytes. Its
``record_routing_stats`` are the server's vLLM-named gauges, what ``SchedkitRouter``
builds each replica's ``EngineView`` from.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from schedkit.config import load_config

__all__ = ["SERVER", "ReplyHead", "SimReplica"]

SERVER = "schedkit.simserver:SimServer"


@dataclass(frozen=True)
class ReplyHead:
    """What the ingress needs before the body: the status, the media type, the replica."""

    status: int
    streamed: bool
    replica: str


class _Server(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def submit(self, body: object, tenant: str | None, chat: bool) -> tuple[Any, Any]: ...
    def events(self, parsed: Any, stream: Any) -> AsyncIterator[bytes]: ...
    async def answer(
        self, body: object, tenant: str | None, *, chat: bool = False
    ) -> tuple[int, dict[str, Any]]: ...
    def is_streamed(self, body: object) -> bool: ...
    def gauges(self) -> dict[str, float]: ...
    def metrics_text(self) -> str: ...
    def models(self) -> dict[str, Any]: ...


def _server_class(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _replica_id() -> str:
    from ray import serve

    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # outside a replica (unit tests): no id
        return ""


class SimReplica:
    """One simulated engine behind Ray Serve (see the module's docstring)."""

    # Ray actors may have an async constructor: the engine loop starts in the replica's
    # event loop, the one that serves its requests.
    async def __init__(  # type: ignore[misc]
        self, config: dict[str, Any] | None, engine_args: list[str], server: str = SERVER
    ) -> None:
        self.server: _Server = _server_class(server).create(load_config(config), engine_args)
        self.replica = _replica_id()
        await self.server.start()

    async def __call__(
        self, body: dict[str, Any], tenant: str | None = None, chat: bool = False
    ) -> AsyncIterator[ReplyHead | bytes]:
        server = self.server
        if not server.is_streamed(body):
            status, answer = await server.answer(body, tenant, chat=chat)
            yield ReplyHead(status, False, self.replica)
            yield json.dumps(answer).encode()
            return
        from schedkit.simserver.openai import BadRequest, error_json

        try:
            parsed, stream = server.submit(body, tenant, chat)
        except BadRequest as exc:  # refused before streaming: an HTTP error, as vLLM's
            yield ReplyHead(exc.status, False, self.replica)
            yield json.dumps(error_json(exc.status, exc.message, exc.kind)).encode()
            return
        yield ReplyHead(200, True, self.replica)
        async for event in server.events(parsed, stream):
            yield event

    def record_routing_stats(self) -> dict[str, float]:
        return self.server.gauges()

    def metrics_text(self) -> str:
        return self.server.metrics_text()

    def models(self) -> dict[str, Any]:
        return self.server.models()

    def replica_id(self) -> str:
        return self.replica
