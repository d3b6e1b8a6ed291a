"""Deprecation shims for modules that moved (issue #36): the old module name keeps
working, with a ``DeprecationWarning`` naming the new one."""

from __future__ import annotations

import importlib
import sys
import warnings

__all__ = ["alias_moved", "warn_moved"]


def warn_moved(old: str, new: str) -> None:
    """Warn, where ``old`` is imported, that it moved to ``new``."""
    warnings.warn(
        f"{old} moved to {new}; import it from there ({old} goes in a later release)",
        DeprecationWarning,
        stacklevel=3,
    )


def alias_moved(old: str, new: str) -> None:
    """Make module ``old`` the very module ``new`` (so monkeypatching either patches
    both), with ``warn_moved``'s warning."""
    warnings.warn(
        f"{old} moved to {new}; import it from there ({old} goes in a later release)",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
