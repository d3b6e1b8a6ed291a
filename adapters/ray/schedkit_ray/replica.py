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


class _Reply(Protocol):
    status: int
    body: dict[str, Any] | None
    events: AsyncIterator[bytes] | None


class _Server(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def respond(self, body: object, tenant: str | None, *, chat: bool = False) -> _Reply: ...
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
        reply = await self.server.respond(body, tenant, chat=chat)
        yield ReplyHead(reply.status, reply.events is not None, self.replica)
        if reply.events is None:
            yield json.dumps(reply.body).encode()
            return
        async for event in reply.events:
            yield event

    def record_routing_stats(self) -> dict[str, float]:
        return self.server.gauges()

    def metrics_text(self) -> str:
        return self.server.metrics_text()

    def models(self) -> dict[str, Any]:
        return self.server.models()

    def replica_id(self) -> str:
        return self.replica
