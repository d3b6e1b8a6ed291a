"""The HTTP edge, in front of every engine's API server: the trust middleware
(:mod:`.middleware`), the strict JSON reader it reads bodies with (:mod:`.strict_json`),
and what the ``schedkit serve <engine>`` launchers share (:mod:`.serving`)."""

from schedkit.edge.middleware import (
    GATEWAY_SECRET_VAR,
    ASGIApp,
    Rewrite,
    TrustMiddleware,
    error_body,
    rewrite_fields,
)

__all__ = [
    "GATEWAY_SECRET_VAR",
    "ASGIApp",
    "Rewrite",
    "TrustMiddleware",
    "error_body",
    "rewrite_fields",
]
