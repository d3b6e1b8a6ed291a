"""The HTTP edge of a trust config (``schedkit.trust``): an engine-neutral ASGI middleware
that resolves each request's tenant, priority and SLO targets before the engine parses
the body, rewrites the body with the decision, and answers HTTP 400 naming the field when
something is invalid.

It reads a body only as every engine would (``schedkit.edge.strict_json``) and refuses any
other (400), forwards what it read, seals its decision for the scheduler
(``schedkit.seal``), bounds the body (413) and the metadata (400), and accepts the tenant
header only from the gateway when the config names it (403 otherwise).

Pure ASGI (no Starlette import), so the engines' servers (FastAPI both) take it as is.
Each adapter supplies where its body keeps the metadata (``Rewrite``): vLLM's
``vllm_xargs``, SGLang's ``custom_params``; the decision itself is ``TrustConfig.resolve``.
"""

from __future__ import annotations

import hmac
import importlib
import ipaddress
import json
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from schedkit.edge.strict_json import BodyError, dump_body, read_body
from schedkit.errors import PolicyConfigError
from schedkit.seal import EDGE_KEY_VAR, SEAL_KEY, Seal
from schedkit.trust import SLO_KEYS, Problem, TrustConfig

__all__ = ["GATEWAY_SECRET_VAR", "Rewrite", "TrustMiddleware", "error_body", "rewrite_fields"]

log = logging.getLogger("schedkit")

GATEWAY_SECRET_VAR = "SCHEDKIT_GATEWAY_SECRET"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Rewrite = Callable[[TrustConfig, "str | None", dict[str, Any], str, "Seal | None"], list[Problem]]
"""``(trust, header tenant, JSON body, URL path, seal)``: rewrite the body in place with
the decision (sealed with ``seal`` when given), or return the problems (the body is then
not sent on)."""

_FORM_TYPES = (b"multipart/form-data", b"application/x-www-form-urlencoded")


def rewrite_fields(
    trust: TrustConfig,
    header_tenant: str | None,
    holder: dict[str, Any],
    key: str,
    priority_holder: dict[str, Any],
    name: str,
    seal: Seal | None = None,
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
        {k: v for k, v in fields.items() if k not in _DECIDED} if isinstance(fields, dict) else {}
    )
    if fields is not None or meta.tenant != trust.default_tenant:
        kept["tenant"] = meta.tenant
    if meta.slo_ttft_ms is not None:
        kept["slo_ttft_ms"] = meta.slo_ttft_ms
    if meta.slo_tpot_ms is not None:
        kept["slo_tpot_ms"] = meta.slo_tpot_ms
    if seal is not None:
        kept[SEAL_KEY] = seal.sign(kept)
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


_DECIDED = frozenset(("tenant", SEAL_KEY, *SLO_KEYS))


def error_body(
    problems: list[Problem], code: int = 400, prefix: str = "invalid scheduling metadata"
) -> bytes:
    """An OpenAI-style error naming the first invalid field (all are in the message)."""
    message = f"{prefix}: " + "; ".join(str(p) for p in problems)
    kind = {400: "BadRequestError", 403: "PermissionDeniedError", 413: "RequestTooLargeError"}
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": kind.get(code, "BadRequestError"),
                "param": problems[0].field,
                "code": code,
            }
        }
    ).encode()


class TrustMiddleware:
    """ASGI middleware applying ``trust`` to every POST with a body.

    Other requests (GET, ...) pass untouched. A POST body is read whole (the engines read
    it whole anyway), at most ``trust.max_body_bytes`` of it (413 beyond). Unless it is an
    HTML form that no engine reads as JSON, it must be JSON every engine reads alike
    (``schedkit.edge.strict_json``, 400 otherwise); a JSON object is rewritten with the
    decision and sealed, and the engine gets the edge's own serialization of it.
    """

    def __init__(self, app: ASGIApp, trust: TrustConfig, rewrite: Rewrite) -> None:
        self.app = app
        self.trust = trust
        self.rewrite = rewrite
        self._header = trust.tenant_header.encode("latin-1")
        self._seal = Seal.from_environ()
        self._networks = [
            ipaddress.ip_network(n, strict=False) for n in trust.trusted_proxies or ()
        ]
        self._secret_header: bytes | None = None
        self._secret = b""
        if trust.gateway_secret_header is not None:
            self._secret_header = trust.gateway_secret_header.encode("latin-1")
            self._secret = os.environ.get(GATEWAY_SECRET_VAR, "").encode()
            if not self._secret:
                raise PolicyConfigError(
                    f"trust.gateway_secret_header is {trust.gateway_secret_header!r} but"
                    f" {GATEWAY_SECRET_VAR} is empty; set it to the secret your gateway sends"
                )
        _log_launch(trust, self._seal is not None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        raw = await self._body(scope, receive, send, headers)
        if raw is None:
            return  # answered 413, or the client went away
        tenant, refusal = self._tenant(scope, headers)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        if self._secret_header is not None:  # the secret goes no further than the edge
            scope = _without(scope, self._secret_header)
        if not raw.strip():
            await self.app(scope, _redeliver([_request(raw)], receive), send)
            return
        try:
            body = read_body(raw, self.trust.max_body_depth)
        except BodyError as exc:
            if _is_form(headers) and not _engine_reads_json(raw):
                await self.app(scope, _redeliver([_request(raw)], receive), send)
            else:
                await _refuse(send, 400, "body", str(exc), "unreadable request body")
            return
        if isinstance(body, dict):
            path = str(scope.get("path", ""))
            problems = self.rewrite(self.trust, tenant, body, path, self._seal)
            if problems:
                await _answer(send, 400, error_body(problems))
                return
        new = dump_body(body)
        await self.app(_with_length(scope, len(new)), _redeliver([_request(new)], receive), send)

    async def _body(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> bytes | None:
        """The request's body, read whole up to ``max_body_bytes``; None when this answered
        413, or passed on to the app a client that went away."""
        limit = self.trust.max_body_bytes
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            await _refuse(send, 413, "body", f"is {int(length)} bytes; at most {limit} are allowed")
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _redeliver([message], receive), send)
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(send, 413, "body", f"is over {limit} bytes (trust.max_body_bytes)")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _tenant(
        self, scope: Scope, headers: dict[bytes, bytes]
    ) -> tuple[str | None, tuple[int, str, str] | None]:
        """The tenant header's value (None when absent or empty), or why the request is
        refused: ``(status, field, message)``."""
        field = f"header {self.trust.tenant_header}"
        given = [v for k, v in scope.get("headers", ()) if k.lower() == self._header]
        if len(given) > 1:
            return None, (400, field, f"appears {len(given)} times; send it once")
        tenant = given[0].decode("latin-1") if given and given[0] else None
        if tenant is not None and not self._from_gateway(scope, headers):
            return None, (
                403,
                field,
                "is accepted only from the gateway (trust.trusted_proxies /"
                " trust.gateway_secret_header); send the request through it",
            )
        return tenant, None

    def _from_gateway(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        if self._networks:
            client = scope.get("client")
            try:
                address = ipaddress.ip_address(client[0]) if client else None
            except ValueError:
                address = None
            if address is None or not any(address in net for net in self._networks):
                return False
        if self._secret_header is not None:
            given = headers.get(self._secret_header, b"")
            if not hmac.compare_digest(given, self._secret):
                return False
        return True


def _log_launch(trust: TrustConfig, sealed: bool) -> None:
    if not trust.trusted_proxies and trust.gateway_secret_header is None:
        log.warning(
            "schedkit: any client reaching this port can set the tenant header %s; to"
            " accept it only from your gateway, set trust.trusted_proxies and/or"
            " trust.gateway_secret_header (docs/trust.md)",
            trust.tenant_header,
        )
    if not sealed:
        log.warning(
            "schedkit: %s is not set, so the scheduler trusts request metadata that did not"
            " pass this edge as the operator's; launch with `schedkit serve`, or set it to"
            " the same secret for the server and the engine (docs/trust.md)",
            EDGE_KEY_VAR,
        )


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """Header names lowered; a repeated header keeps its last value."""
    return {name.lower(): value for name, value in scope.get("headers", ())}


def _with_length(scope: Scope, length: int) -> Scope:
    """``scope`` with its ``content-length`` header set to ``length``."""
    scope = dict(scope)
    scope["headers"] = [
        (k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-length"
    ] + [(b"content-length", str(length).encode())]
    return scope


def _without(scope: Scope, header: bytes) -> Scope:
    scope = dict(scope)
    scope["headers"] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != header]
    return scope


def _is_form(headers: dict[bytes, bytes]) -> bool:
    kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return kind in _FORM_TYPES


def _engine_reads_json(raw: bytes) -> bool:
    """Whether an engine's own reader (the standard library's, with its encoding
    detection, or orjson, where installed) takes ``raw`` as JSON; a deep body the
    standard library gives up on counts as read."""
    try:
        json.loads(raw)
        return True
    except RecursionError:
        return True
    except ValueError:
        pass
    try:
        orjson: Any = importlib.import_module("orjson")
    except ImportError:
        return False
    try:
        orjson.loads(raw)
        return True
    except ValueError:
        return False


async def _refuse(
    send: Send, code: int, field: str, message: str, prefix: str = "request refused"
) -> None:
    await _answer(send, code, error_body([Problem(field, message)], code, prefix))


def _request(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def _redeliver(messages: list[Message], receive: Receive) -> Receive:
    """The app's ``receive``: the messages the edge already read, then the client's."""
    pending = list(messages)

    async def redelivered() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return redelivered


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
