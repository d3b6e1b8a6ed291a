"""The LMDeploy versions this adapter supports, checked when a runtime is installed.

LMDeploy is not a declared dependency (its distribution pulls CUDA torch), so the check
reads the installed ``lmdeploy`` distribution's version (``schedkit.adapter``'s check).
The adapter patches private classes of ``lmdeploy.pytorch.paging`` (the prefill
reorderer and scheduler, ``Scheduler.schedule_running``, the trie's leaf eviction),
whose shape changes between minor releases.
"""

from __future__ import annotations

from importlib import metadata

from schedkit.adapter import UnsupportedEngineError, check_engine_version

SUPPORTED = ">=0.18.0,<0.19"
"""LMDeploy releases whose scheduler internals this adapter was written and tested against."""

_LOWEST = (0, 18, 0)
_BEYOND = (0, 19)
INSTALL = "install a supported LMDeploy (e.g. `pip install lmdeploy==0.18.0`)"


class UnsupportedLmdeployError(UnsupportedEngineError):
    """The installed LMDeploy is outside ``SUPPORTED``."""


def installed_version() -> str:
    try:
        return metadata.version("lmdeploy")
    except metadata.PackageNotFoundError:
        import lmdeploy  # a source checkout without metadata

        return str(lmdeploy.__version__)


def check_version(version: str) -> None:
    """Raise ``UnsupportedLmdeployError`` unless ``version`` lies in ``SUPPORTED``; the
    message names the installed and supported versions and how to install one."""
    check_engine_version(
        "LMDeploy",
        version,
        _LOWEST,
        _BEYOND,
        INSTALL,
        adapter="schedkit-lmdeploy",
        error=UnsupportedLmdeployError,
    )
