"""The edge's seal on the metadata it decided, so the scheduler trusts nothing else.

The HTTP edge (``schedkit.edge``) writes its decision (tenant, SLO targets) into the
request's metadata mapping and adds ``SEAL_KEY``: an HMAC-SHA256 of those values under a
key shared by the edge and the scheduler (``SCHEDKIT_EDGE_KEY``, which ``schedkit serve``
makes for each launch). A scheduler with the key treats metadata without a valid seal as a
client's claim (``TrustConfig.bound(..., vouched=False)``): a body that stepped around the
edge (another encoding, a route or a process the edge does not cover) grants nothing. A
scheduler without the key (offline ``LLM(...)`` or ``sglang.Engine`` use) treats metadata
as the operator's, as before. The key never leaves the server's processes; a seal binds
the values it was made for, so one seen in a log cannot vouch for other values.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping

__all__ = ["EDGE_KEY_VAR", "SEAL_KEY", "Seal"]

EDGE_KEY_VAR = "SCHEDKIT_EDGE_KEY"
SEAL_KEY = "schedkit_seal"
_SEALED = ("tenant", "slo_ttft_ms", "slo_tpot_ms")


class Seal:
    """Signs and checks the edge's metadata with one key."""

    __slots__ = ("_key",)

    def __init__(self, key: str) -> None:
        if len(key) < 16:
            raise ValueError(f"{EDGE_KEY_VAR} must be at least 16 characters long")
        self._key = key.encode()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Seal | None:
        """The seal of this server's processes, or None when no key is set."""
        key = (os.environ if environ is None else environ).get(EDGE_KEY_VAR, "")
        return cls(key) if key else None

    def sign(self, fields: Mapping[str, object]) -> str:
        """The seal of ``fields``' tenant and SLO targets."""
        return hmac.new(self._key, _canonical(fields), hashlib.sha256).hexdigest()

    def verify(self, fields: object) -> bool:
        """Whether ``fields`` (a request's metadata mapping) carries a valid seal."""
        if not isinstance(fields, Mapping):
            return False
        seal = fields.get(SEAL_KEY)
        return isinstance(seal, str) and hmac.compare_digest(seal, self.sign(fields))


def _canonical(fields: Mapping[str, object]) -> bytes:
    """The sealed values, numbers as floats: an engine may carry ``300`` as ``300.0``."""
    values: list[object] = []
    for key in _SEALED:
        value = fields.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = repr(float(value))
        values.append(None if value is None else str(value))
    return json.dumps(values).encode()
