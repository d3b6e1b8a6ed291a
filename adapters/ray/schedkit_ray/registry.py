"""The ``SchedkitRouter``s of this process, for the ingress to report their counters.

Its own module, reached as a module from the router: Ray may ship the router class to
the ingress by value (cloudpickle), which would give the class a copy of any set kept
beside it, while a module is always imported by name.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["add", "routers"]

_ROUTERS: weakref.WeakSet[Any] = weakref.WeakSet()


def add(router: Any) -> None:
    _ROUTERS.add(router)


def routers() -> list[Any]:
    return list(_ROUTERS)
