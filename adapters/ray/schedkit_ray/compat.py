"""The Ray versions this adapter is tested against (``make test-ray``)."""

from __future__ import annotations

from importlib import metadata

from schedkit.errors import SchedkitError

__all__ = ["SUPPORTED", "check_ray"]

SUPPORTED = ("2.60.0",)
"""Ray releases the router and application are verified with (RequestRouter's hooks are
Ray's alpha API: they have changed between minor releases)."""


def check_ray() -> str:
    """The installed Ray's version; SchedkitError when Ray is missing or unsupported."""
    try:
        version = metadata.version("ray")
    except metadata.PackageNotFoundError:
        raise SchedkitError("Ray is not installed: pip install 'ray[serve]==2.60.0'") from None
    if version not in SUPPORTED:
        raise SchedkitError(
            f"Ray {version} is not a supported version ({', '.join(SUPPORTED)});"
            " install one, e.g. pip install 'ray[serve]==2.60.0'"
        )
    return version
