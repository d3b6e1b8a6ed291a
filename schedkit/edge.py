"""The HTTP edge of a trust config (``schedkit.trust``): an engine-neutral ASGI middleware
that resolves each request's tenant, priority and SLO targets before the engine parses
the body, rewrites the body with the decision, and answers HTTP 400 naming the field when
something is invalid.

Pure ASGI (no Starlette import), so the engines' servers (FastAPI both) take it as is.
Each adapter supplies where its body keeps the metadata (``Rewrite``): vLLM's
``vllm_xargs``, SGLang's ``custom_params``; the decision itself is ``TrustConfig.resolve``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from schedkit.trust import SLO_KEYS, Problem, TrustConfig

__all__ = ["Rewrite", "TrustMiddleware", "error_body", "rewrite_fields"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Rewrite = Callable[[TrustConfig, "str | None", dict[str, Any], str], list[Problem]]
"""``(trust, header tenant, JSON body, URL path)``: rewrite the body in place with the
decision, or return the problems (the body is then not sent on)."""


def rewrite_fields(
    trust: TrustConfig,
    header_tenant: str | None,
    holder: dict[str, Any],
    key: str,
    priority_holder: dict[str, Any],
    name: str,
) -> list[Problem]:
    """Resolve one request whose metadata mapping is ``holder[key]`` (named ``name`` in
    problems) and whose priority is ``priority_holder["priority"]``, and write the
    decision back: the mapping keeps its other keys and gets the resolved tenant and SLO
    targets; the priority is set when it is decided (a tier, or an allowed body value)
    and removed otherwise, so the engine's own default applies."""
    fields = holder.get(key)
    meta, problems = trust.resolve(
        header_tenant, fields, priority_holder.get("priority"), body_name=name
    )
    if problems:
        return problems
    kept = (
        {k: v for k, v in fields.items() if k != "tenant" and k not in SLO_KEYS} if fields else {}
    )
    if fields is not None or meta.tenant != trust.default_tenant:
        kept["tenant"] = meta.tenant
    if meta.slo_ttft_ms is not None:
        kept["slo_ttft_ms"] = meta.slo_ttft_ms
    if meta.slo_tpot_ms is not None:
        kept["slo_tpot_ms"] = meta.slo_tpot_ms
    if kept or fields is not None:
        holder[key] = kept
    decided = meta.tenant in trust.tenant_priority or (
        trust.priority_from_body and priority_holder.get("priority") is not None
    )
    if decided:
        priority_holder["priority"] = meta.priority
    else:
        priority_holder.pop("priority", None)
    return []


def error_body(problems: list[Problem]) -> bytes:
    """An OpenAI-style error naming the first invalid field (all are in the message)."""
    message = "invalid scheduling metadata: " + "; ".join(str(p) for p in problems)
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": "BadRequestError",
                "param": problems[0].field,
                "code": 400,
            }
        }
    ).encode()


class TrustMiddleware:
    """ASGI middleware applying ``trust`` to every POST with a JSON object body.

    Other requests (GET, non-JSON, a body that is not an object) pass untouched; the
    body is read whole before the engine sees it (the engines read it whole anyway).
    """

    def __init__(self, app: ASGIApp, trust: TrustConfig, rewrite: Rewrite) -> None:
        self.app = app
        self.trust = trust
        self.rewrite = rewrite
        self._header = trust.tenant_header.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        body = _json_object(raw)
        if body is None:
            await self.app(scope, _replay([_request(raw)], receive), send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name.lower() == self._header:
                header = value.decode("latin-1")
        problems = self.rewrite(self.trust, header, body, str(scope.get("path", "")))
        if problems:
            await _answer(send, 400, error_body(problems))
            return
        new = json.dumps(body).encode()
        scope = dict(scope)
        scope["headers"] = [
            (k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-length"
        ] + [(b"content-length", str(len(new)).encode())]
        await self.app(scope, _replay([_request(new)], receive), send)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    if not raw.lstrip().startswith(b"{"):
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # the engine answers malformed JSON itself
    return body if isinstance(body, dict) else None


def _request(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
