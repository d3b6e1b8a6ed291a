"""What the numbers say: each arm's requests as columns, their latencies computed once (:mod:`.request_table`), each arm's metrics (:mod:`.metrics`), the estimators (:mod:`.estimators`), per-request samples paired between arms (:mod:`.paired`), paired intervals (:mod:`.sectioning`), the episodes that leave a difference without one (:mod:`.episodes`), comparisons with the baseline (:mod:`.compare`) and what no interval can say (:mod:`.flags`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    """What ``schedkit.bench.stats``, the module this package replaced, had (issue #36)."""
    import importlib

    from schedkit._moved import warn_moved

    module = importlib.import_module("schedkit.bench.stats.estimators")
    if name.startswith("_") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_moved(f"schedkit.bench.stats.{name}", f"schedkit.bench.stats.estimators.{name}")
    return getattr(module, name)
