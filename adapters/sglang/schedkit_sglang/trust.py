"""The trust config's HTTP edge on SGLang's server (``docs/trust.md``).

SGLang's HTTP server is a FastAPI app (``sglang.srt.entrypoints.http_server.app``) with no
middleware option of its own; the plugin adds ``schedkit.edge.TrustMiddleware`` to it in
the launcher process, through SGLang's ``HookRegistry`` (a BEFORE hook on
``_setup_and_run_http_server``, where SGLang adds its own API-key middleware, before
uvicorn starts). The body is rewritten before SGLang parses it:

- ``/generate`` (and the other native routes with ``sampling_params``): each
  ``sampling_params`` object's ``custom_params`` (one per prompt in a batch);
- the OpenAI routes: the body's ``custom_params``;
- ``priority`` (top level in both): set when decided (a tenant tier, or an allowed body
  value), removed otherwise, so SGLang's own default applies (``--default-priority-value``).

The config is the ``trust`` section of the selected schedkit config
(``schedkit_sglang.config``). Only SGLang's single-tokenizer mode is covered: with
``--tokenizer-worker-num`` > 1 the worker processes build their own app, and the
scheduler-side bounds are all that apply.
"""

from __future__ import annotations

import logging
from typing import Any

from schedkit.edge import TrustMiddleware, rewrite_fields
from schedkit.seal import Seal
from schedkit.trust import Problem, TrustConfig

log = logging.getLogger("schedkit.sglang")

HTTP_SERVER = "sglang.srt.entrypoints.http_server"
SETUP_TARGET = f"{HTTP_SERVER}._setup_and_run_http_server"
PARAMS = "custom_params"

__all__ = ["SETUP_TARGET", "install_hook", "rewrite"]


def rewrite(
    trust: TrustConfig,
    header_tenant: str | None,
    body: dict[str, Any],
    path: str = "",
    seal: Seal | None = None,
) -> list[Problem]:
    """Apply ``trust`` to one SGLang request body in place."""
    params = body.get("sampling_params")
    if isinstance(params, list):
        problems: list[Problem] = []
        for i, item in enumerate(params):
            if isinstance(item, dict):
                where = f"sampling_params[{i}].{PARAMS}"
                problems += rewrite_fields(trust, header_tenant, item, PARAMS, body, where, seal)
        return problems
    if isinstance(params, dict):
        where = f"sampling_params.{PARAMS}"
        return rewrite_fields(trust, header_tenant, params, PARAMS, body, where, seal)
    if params is None and path.rstrip("/").endswith("/generate") and "/v1/" not in path:
        holder: dict[str, Any] = {}
        problems = rewrite_fields(
            trust, header_tenant, holder, PARAMS, body, f"sampling_params.{PARAMS}", seal
        )
        if holder:
            body["sampling_params"] = holder
        return problems
    return rewrite_fields(trust, header_tenant, body, PARAMS, body, PARAMS, seal)


def install_hook(trust: TrustConfig) -> Any:
    """The BEFORE hook that adds the middleware to SGLang's app (once)."""

    def add_middleware(*args: Any, **kwargs: Any) -> None:
        import importlib

        app = importlib.import_module(HTTP_SERVER).app
        if not getattr(app.state, "schedkit_trust", False):
            app.add_middleware(TrustMiddleware, trust=trust, rewrite=rewrite)
            app.state.schedkit_trust = True
            log.info("schedkit: trust middleware on (tenant header %s)", trust.tenant_header)

    return add_middleware
