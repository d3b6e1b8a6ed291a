"""Discovery of installed policies (entry-point group ``schedkit.policies``).

Discovery reads entry-point metadata only; a policy's module is imported when it is
selected or listed, once. Installing a distribution makes its policies available; only
a config selects one.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata

from schedkit.errors import DuplicatePolicyError, PluginLoadError, UnknownPolicyError
from schedkit.hookspecs import HOOK_NAMES
from schedkit.policy import Policy, PolicyOptions

GROUP = "schedkit.policies"
BUILTIN_DISTRIBUTION = "schedkit"
BUILTINS = {
    "fcfs": "schedkit.policies.builtin:FCFS",
    "priority": "schedkit.policies.builtin:PriorityPolicy",
    "round-robin": "schedkit.policies.builtin:RoundRobin",
    "least-loaded": "schedkit.policies.builtin:LeastLoaded",
    "power-of-two": "schedkit.policies.builtin:PowerOfTwo",
}


@dataclass
class PolicyEntry:
    """One installed policy: where it comes from and how to load it."""

    name: str
    distribution: str
    version: str
    target: str  # "module:attr"
    conflicts: list[str] = field(default_factory=list)  # other distributions, same name
    _loaded: type[Policy] | None = None

    def load(self) -> type[Policy]:
        if self.conflicts:
            dists = ", ".join([self.distribution, *self.conflicts])
            raise DuplicatePolicyError(
                f"policy {self.name!r} is registered by several distributions: {dists}."
                " Uninstall all but one of them."
            )
        if self._loaded is None:
            self._loaded = _import_policy(self)
        return self._loaded


def _import_policy(entry: PolicyEntry) -> type[Policy]:
    module_name, _, attr = entry.target.partition(":")
    where = f"policy {entry.name!r} from distribution {entry.distribution!r} ({entry.target})"
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise PluginLoadError(f"cannot import {where}: {type(exc).__name__}: {exc}") from exc
    options = getattr(obj, "Options", None)
    if not (
        inspect.isclass(obj) and inspect.isclass(options) and issubclass(options, PolicyOptions)
    ):
        raise PluginLoadError(
            f"{where} is not a policy: it must be a class with an `Options` attribute that"
            " subclasses schedkit.PolicyOptions (subclass schedkit.Policy)"
        )
    return obj  # type: ignore[return-value]


def implemented_hooks(policy_cls: type[Policy]) -> list[str]:
    """Names of the hooks a policy class implements."""
    return [
        name
        for name in HOOK_NAMES
        if getattr(getattr(policy_cls, name, None), "schedkit_impl", None) is not None
    ]


class PolicyRegistry:
    """The policies this Python environment provides, by name."""

    def __init__(self, entries: Iterable[PolicyEntry]) -> None:
        self._entries: dict[str, PolicyEntry] = {}
        for entry in entries:
            known = self._entries.get(entry.name)
            if known is None:
                self._entries[entry.name] = entry
            elif (known.distribution, known.target) != (entry.distribution, entry.target):
                known.conflicts.append(entry.distribution)

    @classmethod
    def discover(cls) -> PolicyRegistry:
        version = _version(BUILTIN_DISTRIBUTION)
        builtins = [
            PolicyEntry(name, BUILTIN_DISTRIBUTION, version, target)
            for name, target in BUILTINS.items()
        ]
        found = []
        for ep in metadata.entry_points(group=GROUP):
            dist = ep.dist.name if ep.dist is not None else "(unknown distribution)"
            dist_version = ep.dist.version if ep.dist is not None else "?"
            found.append(PolicyEntry(ep.name, dist, dist_version, ep.value))
        return cls([*builtins, *found])

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str) -> PolicyEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownPolicyError(name, self.names()) from None

    def load(self, name: str) -> type[Policy]:
        return self.entry(name).load()

    def entries(self) -> list[PolicyEntry]:
        return [self._entries[name] for name in self.names()]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "0+unknown"
