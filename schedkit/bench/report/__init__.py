"""What a reader sees: report.md and report.html (:mod:`.render`), their tables, verdicts and figures (:mod:`.tables`, :mod:`.verdicts`, :mod:`.plots`, :mod:`.svg`), and results in ``vllm bench serve``'s format (:mod:`.vllm_format`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    """What ``schedkit.bench.report``, the module this package replaced, had (issue #36)."""
    import importlib

    from schedkit._moved import warn_moved

    module = importlib.import_module("schedkit.bench.report.render")
    if name.startswith("_") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_moved(f"schedkit.bench.report.{name}", f"schedkit.bench.report.render.{name}")
    return getattr(module, name)
