"""A trivial OpenAI-compatible streaming server on loopback, for testing and measuring
``bench --engine openai`` without a model (``benchmarks/fidelity/live_replayer.py``, the tests).

``POST /v1/completions`` streams ``max_tokens`` chunks ``token_delay_s`` apart, each with
``continuous_usage_stats``, then ``finish_reason`` ``length`` and ``[DONE]``, the way
vLLM's server does. Behaviours for failure tests, chosen by the request's tenant header
(``x-tenant-id``, one of ``MODES``): a 500, a 503 naming a schedkit rejection, a stream
cut half way, a body that is not an event stream, a stream that never ends. It records
each request's body, headers and arrival time (``received``) and the most requests it
had in flight at once (``peak``). ``stale_s``: a request that arrives on a kept-alive
connection idle longer than that is dropped unanswered, as by a server whose keep-alive
timer fires as the request arrives (uvicorn's, 5 s, under vLLM and SGLang): the race a
client that reuses old connections loses.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["MODES", "StaleConnections", "StubServer", "serve_stub"]

MODES = ("error-500", "rejected", "cut", "not-a-stream", "hang")


@dataclass
class StaleConnections:
    """An aiohttp middleware (``middleware``) that drops, unanswered, a request arriving on
    a kept-alive connection idle longer than ``stale_s`` (None: none), as a server whose
    keep-alive timer fires as the request arrives; ``dropped`` counts them."""

    stale_s: float | None
    dropped: int = 0
    idle_since: dict[int, float] = field(default_factory=dict)

    @property
    def middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def keep_alive(request: web.Request, handler: Any) -> web.StreamResponse:
            connection, now = id(request.transport), time.monotonic()
            idle = now - self.idle_since.pop(connection, now)
            if self.stale_s is not None and idle > self.stale_s and request.transport:
                self.dropped += 1
                request.transport.close()  # the client sees the server disconnect
                return web.Response()
            try:
                response: web.StreamResponse = await handler(request)
                return response
            finally:
                self.idle_since[connection] = time.monotonic()

        return keep_alive


@dataclass
class StubServer:
    """The running stub: its base ``url`` and what it received."""

    url: str = ""
    owned_by: str = "vllm"
    token_delay_s: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0
    stale: StaleConnections = field(default_factory=lambda: StaleConnections(None))

    @property
    def dropped(self) -> int:
        return self.stale.dropped


@contextmanager
def serve_stub(
    owned_by: str = "vllm",
    token_delay_s: float = 0.0,
    max_model_len: int = 4096,
    port: int = 0,
    stale_s: float | None = None,
) -> Iterator[StubServer]:
    """Run the stub on loopback (``port``; 0: a free one) in a thread for the ``with``
    block."""
    from aiohttp import web

    stub = StubServer(
        owned_by=owned_by, token_delay_s=token_delay_s, stale=StaleConnections(stale_s)
    )
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(stub, max_model_len), access_log=None)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", port)
        loop.run_until_complete(site.start())
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        stub.url = f"http://127.0.0.1:{bound}"
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield stub
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def _app(stub: StubServer, max_model_len: int) -> web.Application:
    """The stub's routes: ``GET /v1/models`` and ``POST /v1/completions``, the latter
    counted in ``stub.in_flight`` and ``stub.peak``."""
    from aiohttp import web

    async def models(request: web.Request) -> web.Response:
        model = {"id": "stub", "object": "model", "owned_by": stub.owned_by}
        model["max_model_len"] = max_model_len  # type: ignore[assignment]
        return web.json_response({"object": "list", "data": [model]})

    async def completions(request: web.Request) -> web.StreamResponse:
        stub.in_flight += 1
        stub.peak = max(stub.peak, stub.in_flight)
        try:
            return await _respond(stub, request)
        finally:
            stub.in_flight -= 1

    app = web.Application(middlewares=[stub.stale.middleware])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


async def _respond(stub: StubServer, request: web.Request) -> web.StreamResponse:
    """Record the request, then answer as its tenant header (one of ``MODES``) says."""
    from aiohttp import web

    body = await request.json()
    stub.received.append({"t": time.perf_counter(), "body": body, "headers": dict(request.headers)})
    prompt = body.get("prompt") or [0]
    mode = request.headers.get("x-tenant-id", "")
    if mode == "error-500":
        return web.json_response({"error": {"message": "boom", "code": 500}}, status=500)
    if mode == "rejected":
        error = {"message": "rejected: tenant over quota", "code": 503}
        return web.json_response({"error": error}, status=503)
    if mode == "not-a-stream":
        return web.Response(text="<html>hello</html>", content_type="text/html")
    return await _stream(stub, request, body, prompt, mode)


async def _stream(
    stub: StubServer, request: web.Request, body: dict[str, Any], prompt: Any, mode: str
) -> web.StreamResponse:
    """``max_tokens`` chunks ``token_delay_s`` apart, then ``[DONE]``; cut half way or
    never ending for the ``cut`` and ``hang`` modes."""
    from aiohttp import web

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    n = int(body.get("max_tokens") or 1)
    for i in range(1, n + 1):
        if mode == "cut" and i > n // 2:
            return response  # the connection ends without finish_reason or [DONE]
        if mode == "hang":
            await asyncio.sleep(3600)
        if stub.token_delay_s:
            await asyncio.sleep(stub.token_delay_s)
        choice = {"index": 0, "text": " x", "finish_reason": "length" if i == n else None}
        usage = {"prompt_tokens": len(prompt), "completion_tokens": i}
        chunk = {"id": "c", "object": "text_completion", "choices": [choice], "usage": usage}
        event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        if i < n:
            await response.write(event)
    # the last token, [DONE] and the stream's end in one write: the client has read the
    # whole response when it sees the finish, so its connection is kept alive for reuse
    await response.write_eof(event + b"data: [DONE]\n\n")
    return response


def main(argv: list[str] | None = None) -> None:
    """``python -m schedkit.testing.openai_stub --port P``: the stub as a server process,
    until SIGTERM or SIGINT (what ``--serve-command`` tests start and stop)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="schedkit's OpenAI-compatible test stub")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--owned-by", default="vllm", help="/v1/models' owned_by")
    parser.add_argument("--token-delay-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with serve_stub(args.owned_by, args.token_delay_s, port=args.port) as stub:
        print(f"openai stub on {stub.url} (owned_by {args.owned_by})", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
