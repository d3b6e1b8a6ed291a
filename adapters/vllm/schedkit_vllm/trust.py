"""The trust config's HTTP edge on vLLM's OpenAI server (``docs/trust.md``).

``TrustMiddleware`` goes to vLLM's supported ASGI extension point,
``--middleware schedkit_vllm.trust.TrustMiddleware`` (``schedkit serve vllm`` adds it). It
reads the tenant header, resolves tenant, priority and SLO targets with
``TrustConfig.resolve``, and rewrites the JSON body before vLLM parses it: ``vllm_xargs``
keeps its other keys and gets the resolved ``tenant``/``slo_*``; ``priority`` is set when
decided (a tenant tier, or an allowed body value) and removed otherwise (vLLM's 0). Bad
input gets HTTP 400 with an OpenAI-style error naming the field. Building it also makes
rejections visible to streaming clients (``schedkit_vllm.streaming``).

vLLM builds the middleware with the app alone, so the config comes from the API server's
environment or command line, first found: ``SCHEDKIT_TRUST`` (the trust section as JSON,
set by ``schedkit serve vllm``), the ``schedkit`` section of ``--additional-config``, the
``SCHEDKIT_CONFIG`` file; otherwise the safe defaults.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from schedkit.edge import ASGIApp, rewrite_fields
from schedkit.edge import TrustMiddleware as _EdgeMiddleware
from schedkit.edge.serving import option_value
from schedkit.errors import PolicyConfigError
from schedkit.seal import Seal
from schedkit.trust import DEFAULT_TRUST, Problem, TrustConfig

TRUST_VAR = "SCHEDKIT_TRUST"
MIDDLEWARE = "schedkit_vllm.trust.TrustMiddleware"
XARGS = "vllm_xargs"

__all__ = ["MIDDLEWARE", "TRUST_VAR", "TrustMiddleware", "rewrite", "trust_from_environ"]


def rewrite(
    trust: TrustConfig,
    header_tenant: str | None,
    body: dict[str, Any],
    path: str = "",
    seal: Seal | None = None,
) -> list[Problem]:
    """Apply ``trust`` to one request body (completions, chat, ...; any path) in place."""
    return rewrite_fields(trust, header_tenant, body, XARGS, body, XARGS, seal)


def trust_from_environ(
    environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None
) -> TrustConfig:
    """The trust config the API server runs with (see the module docstring)."""
    env = os.environ if environ is None else environ
    text = env.get(TRUST_VAR, "").strip()
    if text:
        try:
            return TrustConfig.model_validate_json(text)
        except ValidationError as exc:
            raise PolicyConfigError(f"{TRUST_VAR} is not a valid trust config: {exc}") from exc
    from schedkit_vllm.config import resolve_config

    extra: Any = None
    args = list(sys.argv if argv is None else argv)
    found = option_value(args, "--additional-config", underscores=True)
    if found is not None:
        try:
            extra = json.loads(found)
        except json.JSONDecodeError:
            extra = None
    config = resolve_config(extra, env)
    return config.trust if config is not None else DEFAULT_TRUST


class TrustMiddleware(_EdgeMiddleware):
    """``schedkit.edge.TrustMiddleware`` for vLLM's bodies, configured from the
    environment (vLLM constructs it as ``TrustMiddleware(app)``)."""

    def __init__(self, app: ASGIApp, trust: TrustConfig | None = None) -> None:
        super().__init__(app, trust_from_environ() if trust is None else trust, rewrite)
        from schedkit_vllm import streaming, tracing

        streaming.install()  # vLLM builds the middleware in the API server process
        tracing.install()
