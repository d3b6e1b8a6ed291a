"""The SGLang versions this adapter supports, checked when the plugin activates.

SGLang is not a declared dependency (its distribution pulls CUDA torch), so the check
reads the installed ``sglang`` distribution's version (``schedkit.adapter``'s check).
"""

from __future__ import annotations

from importlib import metadata

from schedkit.adapter import UnsupportedEngineError, check_engine_version

SUPPORTED = ">=0.5.23,<0.6"
"""SGLang releases whose scheduler internals this adapter was written and tested against."""

_LOWEST = (0, 5, 23)
_BEYOND = (0, 6)
INSTALL = "install a supported SGLang (e.g. `pip install sglang==0.5.23`)"


class UnsupportedSglangError(UnsupportedEngineError):
    """The installed SGLang is outside ``SUPPORTED``."""


def installed_version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        import sglang  # a source checkout without metadata

        return str(sglang.__version__)


def check_version(version: str) -> None:
    """Raise ``UnsupportedSglangError`` unless ``version`` lies in ``SUPPORTED``; the
    message names the installed and supported versions and how to install one."""
    check_engine_version(
        "SGLang",
        version,
        _LOWEST,
        _BEYOND,
        INSTALL,
        adapter="schedkit-sglang",
        error=UnsupportedSglangError,
    )
