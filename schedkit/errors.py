"""Errors schedkit raises on bad input. Each message names what was wrong and the fix."""

from __future__ import annotations


class SchedkitError(Exception):
    """Base class for schedkit's user-facing errors."""


class UnknownPolicyError(SchedkitError, KeyError):
    def __init__(self, name: str, installed: list[str]) -> None:
        self.name = name
        self.installed = installed
        super().__init__(
            f"unknown policy {name!r}; installed policies: {', '.join(installed) or '(none)'}."
            " Install the distribution that provides it, or pick one of these."
        )

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicatePolicyError(SchedkitError):
    """Two distributions register the same policy name."""


class PluginLoadError(SchedkitError):
    """A policy's entry point could not be imported or is not a policy."""


class PolicyConfigError(SchedkitError):
    """A schedkit config or a policy's options are invalid."""


class PolicyDecisionError(SchedkitError):
    """A policy returned an invalid decision (raised only in strict mode)."""
