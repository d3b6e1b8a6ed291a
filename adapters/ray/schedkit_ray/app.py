"""The Ray Serve application: an OpenAI-compatible ingress in front of N ``SimReplica``s.

``build_app(AppSpec(...))`` gives the application ``serve.run`` takes. The ingress
(deployment ``SchedkitIngress``) serves ``POST /v1/completions`` and
``/v1/chat/completions`` by calling a worker with keyword arguments (``body``, the
OpenAI JSON; ``tenant``, from the trust settings' tenant header; ``chat``) through a
streaming ``DeploymentHandle``, so the router chooses on the body's fields; the answer,
JSON or server-sent events, passes through with the serving replica's id in the
``x-schedkit-replica`` header. ``GET /v1/models`` is a worker's, ``/health`` answers
200, ``/metrics`` has the routers' counters (``schedkit_ray_*``), ``/schedkit/router``
the same as JSON.

A replica that dies under a request: before its first byte the client gets 502 with the
reason; while streaming, an error event (``{"error": ...}``) ends the stream without
``[DONE]``. Ray does not retry it (the request may have run).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from schedkit.config import SchedkitConfig
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from schedkit_ray.replica import SERVER, ReplyHead, SimReplica
from schedkit_ray.router import DEFAULT_BUDGET_MS, reports

__all__ = ["REPLICA_HEADER", "AppSpec", "build_app", "metrics_text"]

REPLICA_HEADER = "x-schedkit-replica"


@dataclass(frozen=True)
class AppSpec:
    """What the application runs: ``replicas`` simulated engines started with
    ``engine_args`` (``schedkit serve sim``'s), each with ``config``'s policies, and the
    router choosing with ``config``'s ``route_request`` (Ray's default without a config, or
    when no policy of it routes).
    """

    replicas: int
    config: SchedkitConfig | None = None
    engine_args: list[str] = field(default_factory=list)
    stats_period_s: float = 1.0
    budget_ms: float = DEFAULT_BUDGET_MS
    max_ongoing_requests: int = 1024
    server: str = SERVER  # the engine class, for tests' stand-ins


def _fail(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


def _died(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def metrics_text() -> str:
    """The routers' counters of this process, in Prometheus' text format."""
    lines = ["# TYPE schedkit_ray_routed_total counter"]
    found = reports()
    for report in found:
        for replica, by in report.routed.items():
            for chosen_by, n in by.items():
                lines.append(
                    f'schedkit_ray_routed_total{{replica="{replica}",chosen_by="{chosen_by}"}} {n}'
                )
    lines.append("# TYPE schedkit_ray_fallbacks_total counter")
    for report in found:
        for reason, n in report.fallbacks.items():
            lines.append(f'schedkit_ray_fallbacks_total{{reason="{reason}"}} {n}')
    lines.append("# TYPE schedkit_ray_in_flight gauge")
    for report in found:
        for replica, n in report.in_flight.items():
            lines.append(f'schedkit_ray_in_flight{{replica="{replica}"}} {n}')
    return "\n".join(lines) + "\n"


class SchedkitIngress:
    """The HTTP ingress (see the module's docstring)."""

    def __init__(self, workers: Any, tenant_header: str) -> None:
        self.workers = workers
        self.streams = workers.options(stream=True)
        self.tenant_header = tenant_header

    async def __call__(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self.completions(request, chat=path.endswith("chat/completions"))
        if method == "GET" and path == "/v1/models":
            return JSONResponse(await self.workers.models.remote())
        if method == "GET" and path == "/health":
            return PlainTextResponse("ok")
        if method == "GET" and path == "/metrics":
            return PlainTextResponse(metrics_text())
        if method == "GET" and path == "/schedkit/router":
            return JSONResponse([r.as_dict() for r in reports()])
        return _fail(404, f"no route {method} {path}", "NotFoundError")

    async def completions(self, request: Request, *, chat: bool) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _fail(400, "the request body is not JSON", "BadRequestError")
        if not isinstance(body, dict):
            return _fail(400, "the request body is not a JSON object", "BadRequestError")
        tenant = request.headers.get(self.tenant_header)
        replies = self.streams.remote(body=body, tenant=tenant, chat=chat)
        try:
            head = await replies.__anext__()
        except Exception as exc:  # the replica died (or failed) before answering
            return _fail(502, f"the replica failed: {_died(exc)}", "ReplicaFailedError")
        assert isinstance(head, ReplyHead)
        headers = {REPLICA_HEADER: head.replica}
        if not head.streamed:
            try:
                data = b"".join([chunk async for chunk in replies])
            except Exception as exc:
                return _fail(502, f"the replica failed: {_died(exc)}", "ReplicaFailedError")
            return Response(data, head.status, headers, media_type="application/json")
        return StreamingResponse(
            _relay(replies, head.replica), head.status, headers, media_type="text/event-stream"
        )


async def _relay(replies: Any, replica: str) -> AsyncIterator[bytes]:
    """The events as they come; a replica's death mid-stream is one error event."""
    try:
        async for event in replies:
            yield event
    except Exception as exc:
        message = f"replica {replica} failed mid-stream: {_died(exc)}"
        error = {"message": message, "type": "ReplicaFailedError", "code": 502}
        yield f"data: {json.dumps({'error': error})}\n\n".encode()


def routes(config: SchedkitConfig | None) -> bool:
    """Whether ``config``'s policies route (``route_request``); else Ray's default router
    chooses, untouched, and the policies run only in the replicas' engines."""
    if config is None:
        return False
    from schedkit.facade import PolicyFacade

    return PolicyFacade.from_config(config).has_route


def build_app(spec: AppSpec) -> Any:
    """The application ``spec`` describes (``serve.run`` it)."""
    config = spec.config
    if config is None or not routes(config):  # Ray's default router, untouched
        router = RequestRouterConfig(request_routing_stats_period_s=spec.stats_period_s)
    else:
        router = RequestRouterConfig(
            request_router_class="schedkit_ray.router.SchedkitRouter",
            request_router_kwargs={
                "policy": config.model_dump(mode="json"),
                "budget_ms": spec.budget_ms,
            },
            request_routing_stats_period_s=spec.stats_period_s,
        )
    worker = serve.deployment(SimReplica, name="SimReplica").options(
        num_replicas=spec.replicas,
        max_ongoing_requests=spec.max_ongoing_requests,
        request_router_config=router,
        ray_actor_options={"num_cpus": 0},
    )
    ingress = serve.deployment(SchedkitIngress, name="SchedkitIngress").options(
        max_ongoing_requests=spec.max_ongoing_requests * max(1, spec.replicas),
        ray_actor_options={"num_cpus": 0},
    )
    engine_config = None if config is None else config.model_dump(mode="json")
    tenant_header = (config or SchedkitConfig()).trust.tenant_header
    workers = worker.bind(engine_config, list(spec.engine_args), spec.server)
    return ingress.bind(workers, tenant_header)
