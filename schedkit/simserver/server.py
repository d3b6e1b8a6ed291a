"""``SimServer``: the simulated engine behind vLLM's OpenAI API, and its HTTP routes.

One server is one simulated replica (:class:`WallClockEngine`) with the selected
policies. ``respond`` serves one request body (the HTTP routes here and Ray Serve
replicas, ``schedkit_ray``, call it); ``gauges`` are the vLLM-named gauges a router reads
(``schedkit.edge.remote.Load``); ``metrics_text`` is the ``/metrics`` page.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedkit.config import SchedkitConfig
from schedkit.facade import PolicyFacade
from schedkit.simserver.clock import Stream, WallClockEngine
from schedkit.simserver.metrics import metrics_page
from schedkit.simserver.openai import (
    BadRequest,
    Parsed,
    answer,
    chunk,
    error_json,
    read_request,
    sse,
    usage_chunk,
)
from schedkit.simserver.settings import ServeSimArgs, build_engine, parse_args
from schedkit.workload import TraceRequest

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["Reply", "SimServer"]

OWNED_BY = "schedkit-sim"  # /v1/models' owned_by: bench --engine openai sends vLLM's fields


@dataclass(frozen=True)
class Reply:
    """The answer to one request: its HTTP status and either a JSON ``body`` (a request not
    streamed, or refused) or the server-sent ``events`` of a streamed one."""

    status: int
    body: dict[str, Any] | None = None
    events: AsyncIterator[bytes] | None = None


class SimServer:
    """A simulated replica serving OpenAI requests (see the module's docstring)."""

    def __init__(
        self, config: SchedkitConfig, args: ServeSimArgs, facade: PolicyFacade | None = None
    ) -> None:
        """A server of ``config``'s policies (or ``facade``'s: policy objects of one's
        own, for tests) with ``args``' engine."""
        self.config = config
        self.args = args
        self.facade = facade or PolicyFacade.from_config(config)
        built = build_engine(args)
        self.description = built.description
        self.max_model_len = built.max_model_len
        self.clock = WallClockEngine(
            built.cost, built.config, self.facade, max_lag_s=args.max_lag_ms / 1e3
        )

    @classmethod
    def create(cls, config: SchedkitConfig, engine_args: list[str]) -> SimServer:
        """A server from ``schedkit serve sim``'s engine arguments (``SchedkitError`` on bad
        ones)."""
        return cls(config, parse_args(engine_args))

    async def start(self) -> None:
        """Start the engine in the running event loop."""
        self.clock.start()

    async def stop(self) -> None:
        await self.clock.stop()

    # -- requests -------------------------------------------------------------------

    def submit(self, body: object, tenant: str | None, chat: bool) -> tuple[Parsed, Stream]:
        """Read ``body`` and deliver it to the engine (``BadRequest`` when refused: a bad
        body, or scheduling metadata the trust settings refuse, as the vLLM adapter's)."""
        p = read_request(body, chat, self.args.served_model_name, self.max_model_len)
        assert isinstance(body, dict)
        meta, problems = self.config.trust.resolve(
            tenant, body.get("vllm_xargs"), body.get("priority"), body_name="vllm_xargs"
        )
        if problems:
            raise BadRequest(400, "invalid scheduling metadata: " + "; ".join(map(str, problems)))
        trace = TraceRequest(
            request_id=p.id,
            arrival_s=0.0,
            prompt_tokens=len(p.ids),
            output_tokens=p.max_tokens,
            tenant=meta.tenant,
            priority=meta.priority,
            slo_ttft_ms=meta.slo_ttft_ms,
            slo_tpot_ms=meta.slo_tpot_ms,
        )
        return p, self.clock.submit(p.ids, p.max_tokens, trace)

    async def events(self, p: Parsed, s: Stream) -> AsyncIterator[bytes]:
        """The server-sent events of a request delivered (``submit``): a chunk per token
        as the engine releases it, the finish, usage when asked, ``[DONE]``."""
        sent = 0
        async for tokens in s.updates():
            finish = None
            if s.finish_reason == "length" and tokens == p.max_tokens:
                finish = "length"
            for t in range(sent + 1, tokens + 1):
                last = finish if t == tokens else None
                yield sse(chunk(p, t, 1, last, cached=s.cached_tokens))
            sent = tokens
        if s.finish_reason == "rejected":
            yield sse(chunk(p, sent, 0, "abort", f"rejected: {s.reject_reason}"))
        if p.include_usage:
            yield sse(usage_chunk(p, sent, s.cached_tokens))
        yield sse("[DONE]")

    async def answer(
        self, body: object, tenant: str | None, *, chat: bool = False
    ) -> tuple[int, dict[str, Any]]:
        """A request not streamed: its HTTP status and JSON answer."""
        try:
            p, s = self.submit(body, tenant, chat)
        except BadRequest as exc:
            return exc.status, error_json(exc.status, exc.message, exc.kind)
        async for _ in s.updates():
            pass
        if s.finish_reason == "rejected":
            return 200, answer(p, 0, "abort", f"rejected: {s.reject_reason}", 0)
        return 200, answer(p, s.tokens, "length", None, s.cached_tokens)

    async def respond(self, body: object, tenant: str | None, *, chat: bool = False) -> Reply:
        """Serve ``body``: a streamed request's events once it is delivered (a body refused
        before streaming is an HTTP error, as vLLM answers it), else the whole answer."""
        if not (isinstance(body, dict) and body.get("stream") is True):
            status, data = await self.answer(body, tenant, chat=chat)
            return Reply(status, data)
        try:
            p, s = self.submit(body, tenant, chat)
        except BadRequest as exc:
            return Reply(exc.status, error_json(exc.status, exc.message, exc.kind))
        return Reply(200, events=self.events(p, s))

    # -- what routers and Prometheus read ---------------------------------------------

    def gauges(self) -> dict[str, float]:
        """vLLM's gauges of this replica now (``vllm:`` names, as ``/metrics`` has them)."""
        engine = self.clock.engine
        kv = engine.kv
        return {
            "vllm:num_requests_running": float(len(engine.running)),
            "vllm:num_requests_waiting": float(
                len(engine.waiting) + len(engine.pending) - engine.arrived
            ),
            "vllm:kv_cache_usage_perc": kv.num_used / kv.num_blocks,
            "vllm:num_gpu_blocks": float(kv.num_blocks),
            "vllm:block_size": float(engine.cfg.block_size),
            "schedkit_sim_lag_seconds": self.clock.lag_s,
        }

    def metrics_text(self) -> str:
        """The Prometheus page (``/metrics``)."""
        return metrics_page(self.clock, self.facade, self.args.served_model_name, self.gauges())

    def models(self) -> dict[str, Any]:
        model = {
            "id": self.args.served_model_name,
            "object": "model",
            "owned_by": OWNED_BY,
            "max_model_len": self.max_model_len,
            "root": self.description,
        }
        return {"object": "list", "data": [model]}

    # -- HTTP -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application: vLLM's routes this server has."""
        from aiohttp import web

        async def completions(request: web.Request) -> web.StreamResponse:
            return await self._http(request, chat=False)

        async def chat(request: web.Request) -> web.StreamResponse:
            return await self._http(request, chat=True)

        async def models(request: web.Request) -> web.Response:
            return web.json_response(self.models())

        async def health(request: web.Request) -> web.Response:
            return web.Response(status=200)

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=self.metrics_text(), content_type="text/plain")

        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/v1/models", models)
        app.router.add_get("/health", health)
        app.router.add_get("/metrics", metrics)
        return app

    async def _http(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        from aiohttp import web

        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response(error_json(400, "the request body is not JSON"), status=400)
        tenant = request.headers.get(self.config.trust.tenant_header)
        reply = await self.respond(body, tenant, chat=chat)
        if reply.events is None:
            return web.json_response(reply.body, status=reply.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async for event in reply.events:
            await response.write(event)
        await response.write_eof()
        return response
