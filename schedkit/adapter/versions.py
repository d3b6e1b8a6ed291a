"""The supported-version check every adapter makes before touching engine internals."""

from __future__ import annotations

import re

__all__ = ["UnsupportedEngineError", "check_engine_version", "parse_version"]


class UnsupportedEngineError(ImportError):
    """The installed engine is outside the versions an adapter supports."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.33.1.dev4+gabc"`` -> ``(0, 33, 1)``; missing parts count as 0."""
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(version))
    if match is None:
        raise ValueError(f"cannot read the version {version!r}")
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    return major, minor, patch


def check_engine_version(
    engine: str,
    installed: str,
    lowest: tuple[int, ...],
    beyond: tuple[int, ...],
    install: str,
    *,
    adapter: str,
    error: type[ImportError] = UnsupportedEngineError,
) -> None:
    """Raise ``error`` unless ``lowest <= installed < beyond``.

    The message names the installed version, the supported range and ``install``, the
    command that installs a supported release.
    """
    supported = f">={_dotted(lowest)},<{_dotted(beyond)}"
    try:
        parsed = parse_version(installed)
    except ValueError:
        raise error(
            f"cannot read the installed {engine} version {installed!r}; {adapter} supports"
            f" {engine} {supported}: {install}"
        ) from None
    if not lowest <= parsed[: len(lowest)] or not parsed[: len(beyond)] < beyond:
        raise error(
            f"{adapter} supports {engine} {supported}, but {engine} {installed} is installed."
            f" The adapter relies on scheduler internals that change between releases:"
            f" {install}, or a {adapter} release that supports yours."
        )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
