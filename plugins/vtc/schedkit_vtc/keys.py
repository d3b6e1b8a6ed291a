"""Tenant keys: what the ledger stores for a tenant id, bounded in length whatever the id."""

from __future__ import annotations

import hashlib

__all__ = ["OVERFLOW_TENANT", "TENANT_KEY_CHARS", "tenant_key"]

TENANT_KEY_CHARS = 128
"""Longest key the ledger stores. Ids shorter than this are their own key; longer ones
are stored as a key of exactly this length (a prefix and a SHA-256 of the whole id)."""

_PREFIX_CHARS = TENANT_KEY_CHARS - 65  # then "#" and 64 hex digits

OVERFLOW_TENANT = "(vtc overflow)".ljust(TENANT_KEY_CHARS, ".")
"""The key shared by tenants that arrive while ``max_tenants`` tenants all have requests
in the engine. No tenant id maps to it: it is ``TENANT_KEY_CHARS`` long, like a hashed
key, but has no ``#`` where every hashed key has one."""


def tenant_key(tenant: str) -> str:
    """The ledger's key for ``tenant``: the id itself when shorter than
    ``TENANT_KEY_CHARS``, else its first characters, ``#`` and the SHA-256 of the id.

    Distinct ids get distinct keys (short keys are shorter than every hashed one), and a
    key never keeps a long id alive: the slice is a copy.
    """
    if len(tenant) < TENANT_KEY_CHARS:
        return tenant
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{tenant[:_PREFIX_CHARS]}#{digest}"
