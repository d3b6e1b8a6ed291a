"""A routing policy for the Ray adapter's tests: the request's tenant says what it does.

``last``: the highest index; ``first``: index 0; ``raise``: raises; ``invalid``: an
index out of range; ``slow``: sleeps 0.3 s, then the highest index; anything else: None
(the next policy of a composition, or Ray's default).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from schedkit import Policy, PolicyOptions, ReplicaView, RequestView, hookimpl


class ByTenant(Policy):
    class Options(PolicyOptions):
        pass

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int | None:
        tenant = request.tenant
        if tenant == "last":
            return len(replicas) - 1
        if tenant == "first":
            return 0
        if tenant == "raise":
            raise RuntimeError("test-by-tenant was told to raise")
        if tenant == "invalid":
            return len(replicas) + 5
        if tenant == "slow":
            time.sleep(0.3)
            return len(replicas) - 1
        return None
