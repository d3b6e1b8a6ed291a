"""How a request's tenant, priority and SLO reach LMDeploy's scheduler, and a rejection
gets back to the client.

LMDeploy's ``GenerationConfig`` has no priority or free-form field, and its OpenAI
request models drop keys they do not know. The carrier is a ``schedkit`` object in the
request body::

    {"model": "m", "messages": [...], "schedkit": {"tenant": "gold", "priority": 1,
     "slo_ttft_ms": 500, "slo_tpot_ms": 50}}

1. In the api_server process (``install_api``): ``schedkit.edge.TrustMiddleware``
   resolves it as the operator's ``TrustConfig`` says (the tenant header, which body
   fields count, tiers; HTTP 400 naming an invalid field) and rewrites the body with the
   decision; ``ChatCompletionRequest`` and ``CompletionRequest`` keep the key, and
   ``build_generation_config`` hangs it on the ``GenerationConfig`` (attribute
   ``schedkit``), which LMDeploy pickles to its engine process as it is.
2. In the engine process (``install_engine``): ``SamplingParam.from_gen_config`` copies it
   onto the ``SamplingParam``, and ``Engine._add_message`` gives it to the sequence
   (``seq.meta``) before admission, observes a session's next turn as a new request
   (reporting the previous turn finished; ``Engine._on_end_session`` reports the turn of a
   session that keeps its cache), and answers a rejected request at once with
   ``ResponseType.CANCEL`` (the client sees ``finish_reason: "abort"``; the reason is in
   the response's ``err_msg``, logged and counted).

Both run only when ``schedkit serve lmdeploy`` (``schedkit_lmdeploy.launch``) selected a
policy. They touch LMDeploy code that needs a GPU to run end to end; the tests drive each
piece with LMDeploy's real classes (request models, ``build_generation_config``,
``SamplingParam``, ``Engine._add_message`` on a real ``Scheduler``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from schedkit.edge import TrustMiddleware, rewrite_fields
from schedkit.seal import Seal
from schedkit.trust import Problem, TrustConfig

__all__ = ["BODY_KEY", "install_api", "install_engine", "rewrite"]

log = logging.getLogger("schedkit.lmdeploy")

BODY_KEY = "schedkit"
_ATTR = "schedkit"  # on GenerationConfig and SamplingParam
_BUILDERS = (  # modules that bound build_generation_config at import
    "lmdeploy.serve.core.generation_config",
    "lmdeploy.serve.openai.endpoints.common",
    "lmdeploy.serve.core.chat_runner",
    "lmdeploy.serve.openai.responses.request",
)
_DONE: set[str] = set()


def rewrite(
    trust: TrustConfig,
    header_tenant: str | None,
    body: dict[str, Any],
    path: str = "",
    seal: Seal | None = None,
) -> list[Problem]:
    """Apply ``trust`` to one LMDeploy request body in place: its ``schedkit`` object
    (priority inside it) gets the resolved tenant, priority and SLO targets."""
    holder = body.get(BODY_KEY)
    if holder is not None and not isinstance(holder, dict):
        return [Problem(BODY_KEY, "must be a JSON object")]
    fields: dict[str, Any] = {} if holder is None else holder
    wrapper = {BODY_KEY: {k: v for k, v in fields.items() if k != "priority"}}
    problems = rewrite_fields(trust, header_tenant, wrapper, BODY_KEY, fields, BODY_KEY, seal)
    if problems:
        return problems
    decided = wrapper[BODY_KEY]
    if "priority" in fields:
        decided["priority"] = fields["priority"]
    if decided or holder is not None:
        body[BODY_KEY] = decided
    return []


def install_api(trust: TrustConfig) -> None:
    """In the api_server process: keep, check and pass on the request's ``schedkit``
    object (once per process)."""
    if "api" in _DONE:
        return
    import importlib

    from lmdeploy.serve.openai import protocol

    for model in (protocol.ChatCompletionRequest, protocol.CompletionRequest):
        model.model_config["extra"] = "allow"  # pydantic drops unknown keys otherwise
        model.model_rebuild(force=True)
    core = importlib.import_module(_BUILDERS[0])
    build = _carrying(core.build_generation_config)
    for name in _BUILDERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # an endpoint whose extra dependencies are not installed
            continue
        setattr(module, "build_generation_config", build)  # noqa: B010
    server = importlib.import_module("lmdeploy.serve.openai.api_server")
    mount = server.mount_metrics

    def mount_metrics(app: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(app.state, "schedkit_trust", False):  # api_server builds one app
            app.add_middleware(TrustMiddleware, trust=trust, rewrite=rewrite)
            app.state.schedkit_trust = True
            log.info("schedkit: trust middleware on (tenant header %s)", trust.tenant_header)
        return mount(app, *args, **kwargs)

    setattr(server, "mount_metrics", mount_metrics)  # noqa: B010
    _DONE.add("api")


def _carrying(stock: Callable[..., Any]) -> Callable[..., Any]:
    def build_generation_config(request: Any, *args: Any, **kwargs: Any) -> Any:
        config = stock(request, *args, **kwargs)
        meta = (getattr(request, "model_extra", None) or {}).get(BODY_KEY)
        if isinstance(meta, dict):
            setattr(config, _ATTR, dict(meta))
        return config

    return build_generation_config


def install_engine() -> None:
    """In the engine process: carry ``GenerationConfig.schedkit`` to the sequence, observe
    new turns, answer rejections (once per process)."""
    if "engine" in _DONE:
        return
    from lmdeploy.pytorch.engine import engine as module
    from lmdeploy.pytorch.messages import SamplingParam

    stock_params = SamplingParam.__dict__["from_gen_config"].__func__

    def from_gen_config(cls: Any, gen_config: Any) -> Any:
        params = stock_params(cls, gen_config)
        meta = getattr(gen_config, _ATTR, None)
        if meta is not None:
            setattr(params, _ATTR, meta)
        return params

    SamplingParam.from_gen_config = classmethod(from_gen_config)
    module.Engine._add_message = _add_message(module.Engine.__dict__["_add_message"])
    module.Engine._on_end_session = _on_end_session(module.Engine.__dict__["_on_end_session"])
    _DONE.add("engine")


def request_meta_of(sampling_param: Any) -> Any:
    """The ``schedkit`` mapping a request's ``SamplingParam`` carries, or None."""
    return getattr(sampling_param, _ATTR, None)


def _add_message(stock: Callable[..., Any]) -> Callable[..., Any]:
    def add_message(self: Any, reqs: list[Any]) -> None:
        scheduler = self.scheduler
        runtime = getattr(scheduler, "schedkit", None)
        if runtime is None:
            stock(self, reqs)
            return
        from lmdeploy.messages import ResponseType

        for req in reqs:  # one at a time, as LMDeploy's loop takes them: a second
            # request for a session in the same call is that session's next turn
            session = scheduler.get_session(req.data["session_id"])
            turn = session is not None and bool(session.sequences)
            if turn:
                for seq in session.sequences.values():
                    runtime.finish(seq)  # the previous turn ended with its last token
            stock(self, [req])
            session = scheduler.get_session(req.data["session_id"])
            if session is None or not session.sequences:
                continue
            seq = next(iter(session.sequences.values()))
            if turn:
                seq.meta = request_meta_of(seq.sampling_param) or {}
                runtime.arrived(seq)
            reason = runtime.rejection(seq)
            if reason is not None and getattr(seq, "resp", None) is not None:
                self._response(seq.resp, ResponseType.CANCEL, err_msg=f"rejected: {reason}")

    return add_message


def _on_end_session(stock: Callable[..., Any]) -> Callable[..., Any]:
    def on_end_session(self: Any, reqs: list[Any], **kwargs: Any) -> None:
        """A session whose sequence keeps its cache (``preserve_cache``) is not ended, only
        its sequence finished: its turn is reported finished here."""
        runtime = getattr(self.scheduler, "schedkit", None)
        if runtime is not None:
            for req in reqs:
                session = self.scheduler.get_session(req.data["session_id"])
                msgs = list(session.sequences.values()) if session is not None else []
                if msgs and msgs[0].preserve_cache:
                    runtime.finish(msgs[0])
        stock(self, reqs, **kwargs)

    return on_end_session
