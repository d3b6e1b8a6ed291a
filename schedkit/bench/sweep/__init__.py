"""Load sweeps: what is swept and how it is summed up (:mod:`.spec`), running the probe points (:mod:`.run`), and the sweep's reports (:mod:`.report`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    """What ``schedkit.bench.sweep``, the module this package replaced, had (issue #36)."""
    import importlib

    from schedkit._moved import warn_moved

    module = importlib.import_module("schedkit.bench.sweep.spec")
    if name.startswith("_") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_moved(f"schedkit.bench.sweep.{name}", f"schedkit.bench.sweep.spec.{name}")
    return getattr(module, name)
