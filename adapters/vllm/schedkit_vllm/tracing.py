"""schedkit's decisions on vLLM's request spans (OpenTelemetry, ``docs/observability.md``).

When vLLM traces requests (``--otlp-traces-endpoint``), the API server process makes one
``llm_request`` span per finished request (``OutputProcessor.do_tracing``). ``install``
adds to it:

- ``schedkit.policy``: the configured composition (``slo+vtc``);
- ``schedkit.rejected``: whether the policy rejected the request at admission, and
  ``schedkit.rejection``, the reason the client was given;
- ``schedkit.preemptions``: how many times the request was preempted (vLLM's own count
  of the preemptions its scheduler carried out, the policy's victims among them).

Without tracing vLLM never calls ``do_tracing`` and nothing here runs. ``schedkit serve
vllm`` names the composition in ``SCHEDKIT_POLICY_LABEL``; ``schedkit_vllm.trust.
TrustMiddleware`` installs this in the API server process, as it does ``streaming``.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from contextvars import ContextVar
from typing import Any

from schedkit_vllm.streaming import REJECTED

__all__ = ["LABEL_VAR", "decision_attributes", "install"]

LABEL_VAR = "SCHEDKIT_POLICY_LABEL"
SPAN = "llm_request"
_MODULE = "vllm.v1.engine.output_processor"
_MARK = "_schedkit_spans"
_extra: ContextVar[dict[str, Any] | None] = ContextVar("schedkit_span_attributes", default=None)

log = logging.getLogger(__name__)


def decision_attributes(policy: str, output: Any, req_state: Any) -> dict[str, Any]:
    """The span attributes of one finished request: ``output`` its last
    ``EngineCoreOutput``, ``req_state`` the output processor's ``RequestState``."""
    attributes: dict[str, Any] = {"schedkit.policy": policy}
    stop = getattr(output, "stop_reason", None)
    rejected = isinstance(stop, str) and stop.startswith(REJECTED)
    attributes["schedkit.rejected"] = rejected
    if isinstance(stop, str) and rejected:
        attributes["schedkit.rejection"] = stop.removeprefix(REJECTED)
    stats = getattr(req_state, "stats", None)
    preemptions = getattr(stats, "num_preemptions", None)
    if isinstance(preemptions, int):
        attributes["schedkit.preemptions"] = preemptions
    return attributes


def install(policy: str | None = None) -> bool:
    """Wrap ``OutputProcessor.do_tracing`` and the ``instrument_manual`` it calls (once);
    False, with a warning, when this vLLM has neither (its spans then carry none of
    schedkit's attributes)."""
    label = policy if policy is not None else os.environ.get(LABEL_VAR, "")
    try:
        module = importlib.import_module(_MODULE)
        cls = module.OutputProcessor
        original = cls.do_tracing
        manual = module.instrument_manual
    except (ImportError, AttributeError):
        log.warning("schedkit: vLLM's OutputProcessor.do_tracing not found; request spans"
                    " carry no schedkit attributes")  # fmt: skip
        return False
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def do_tracing(self: Any, output: Any, req_state: Any, *args: Any, **kwargs: Any) -> Any:
        token = _extra.set(decision_attributes(label, output, req_state))
        try:
            return original(self, output, req_state, *args, **kwargs)
        finally:
            _extra.reset(token)

    @functools.wraps(manual)
    def instrument_manual(*args: Any, **kwargs: Any) -> Any:
        extra = _extra.get()
        name = kwargs.get("span_name", args[0] if args else None)
        if extra and name == SPAN:
            if len(args) > 3:  # attributes given by position
                args = (*args[:3], {**(args[3] or {}), **extra}, *args[4:])
            else:
                kwargs["attributes"] = {**(kwargs.get("attributes") or {}), **extra}
        return manual(*args, **kwargs)

    setattr(do_tracing, _MARK, True)
    cls.do_tracing = do_tracing
    setattr(module, "instrument_manual", instrument_manual)  # noqa: B010  (vLLM's global)
    return True
