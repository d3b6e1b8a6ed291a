"""The SGLang versions this adapter supports, checked when the plugin activates.

SGLang is not a declared dependency (its distribution pulls CUDA torch), so the check
reads the installed ``sglang`` distribution's version.
"""

from __future__ import annotations

import re
from importlib import metadata

SUPPORTED = ">=0.5.23,<0.6"
"""SGLang releases whose scheduler internals this adapter was written and tested against."""

_LOWEST = (0, 5, 23)
_BEYOND = (0, 6, 0)


class UnsupportedSglangError(ImportError):
    """The installed SGLang is outside ``SUPPORTED``."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)``; missing parts count as 0."""
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if match is None:
        raise UnsupportedSglangError(
            f"cannot read the installed SGLang version {version!r}; schedkit-sglang supports"
            f" SGLang {SUPPORTED}"
        )
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    return major, minor, patch


def installed_version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        import sglang  # a source checkout without metadata

        return str(sglang.__version__)


def check_version(version: str) -> None:
    """Raise ``UnsupportedSglangError`` unless ``version`` lies in ``SUPPORTED``."""
    if not _LOWEST <= parse_version(version) < _BEYOND:
        raise UnsupportedSglangError(
            f"schedkit-sglang supports SGLang {SUPPORTED}, but SGLang {version} is installed."
            " The adapter relies on scheduler internals that change between releases:"
            " install a supported SGLang (e.g. `pip install sglang==0.5.23`) or a"
            " schedkit-sglang release that supports yours."
        )
