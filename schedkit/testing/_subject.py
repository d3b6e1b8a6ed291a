"""The policy under test: calling its hooks through a strict facade and judging the answers."""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from schedkit.decisions import Admission, StepReport
from schedkit.errors import PluginLoadError, PolicyDecisionError
from schedkit.facade import PolicyFacade
from schedkit.plugins import PolicyRegistry
from schedkit.policy import Policy, PolicyOptions
from schedkit.validation import options_error
from schedkit.views import BlockState, EngineState, ReplicaState, RequestState, _short

# hook -> (PolicyFacade method, argument names as in hookspecs)
_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "on_request_arrived": ("admit", ("request", "engine")),
    "admit_request": ("admit", ("request", "engine")),
    "order_waiting": ("order_waiting", ("waiting", "engine")),
    "plan_batch": ("plan_batch", ("engine", "default")),
    "select_victims": ("select_victims", ("running", "needing", "engine")),
    "select_evictions": ("select_evictions", ("candidates", "num_blocks", "engine")),
    "route_request": ("route", ("request", "replicas")),
    "waiting_key": ("waiting_key", ("request", "engine")),
    "victim_key": ("victim_key", ("request", "engine")),
    "eviction_key": ("eviction_key", ("block", "engine")),
    "on_step_finished": ("step_finished", ("report", "engine")),
    "on_request_finished": ("request_finished", ("request", "reason", "engine")),
}


class ConformanceError(AssertionError):
    """A policy broke the hook contract; the message names the policy, hook and state."""

    __module__ = "schedkit.testing"  # its public home, shown in pytest's report


@dataclasses.dataclass(frozen=True)
class _Subject:
    """The policy under test: how to make fresh instances, and how to report failures."""

    name: str
    cls: type[Policy]
    options: PolicyOptions
    seed: int

    @classmethod
    def create(
        cls, policy: str | type[Policy], options: Mapping[str, Any] | None, seed: int
    ) -> _Subject:
        if isinstance(policy, str):
            name, policy_cls = policy, PolicyRegistry.discover().load(policy)
        else:
            name, policy_cls = policy.__name__, policy
        model = getattr(policy_cls, "Options", None)
        if not (inspect.isclass(model) and issubclass(model, PolicyOptions)):
            raise ConformanceError(
                f"policy {name!r}: `Options` must subclass schedkit.PolicyOptions"
            )
        try:
            validated = model.model_validate(dict(options or {}))
        except ValidationError as exc:
            raise options_error(name, model, exc) from exc
        try:
            model.model_validate({**(options or {}), "schedkit_conformance_unknown": 1})
        except ValidationError:
            pass
        else:
            raise ConformanceError(
                f"policy {name!r}: its Options model accepts unknown fields, so a typo in a"
                " config is silently ignored; keep extra='forbid' (inherited from"
                " schedkit.PolicyOptions)"
            )
        return cls(name, policy_cls, validated, seed)

    def facade(self) -> PolicyFacade:
        try:
            instance = self.cls(self.options)
            return PolicyFacade([(self.name, instance)], strict=True)
        except PluginLoadError as exc:
            raise ConformanceError(f"policy {self.name!r} cannot be registered: {exc}") from exc
        except Exception as exc:
            raise ConformanceError(
                f"policy {self.name!r} cannot be instantiated with {self.options!r}:"
                f" {type(exc).__name__}: {exc}"
            ) from exc

    def fail(self, hook: str, problem: str, args: Sequence[object], where: str = "") -> NoReturn:
        state = _describe(_CALLS[hook][1], args)
        raise ConformanceError(
            f"policy {self.name!r} fails the contract of hook {hook}{where}: {problem}\n"
            f"{state}\nreproduce with check_policy(..., seed={self.seed})"
        )

    def invoke(
        self,
        facade: PolicyFacade,
        hook: str,
        args: tuple[Any, ...],
        shown: Sequence[object] | None = None,
        where: str = "",
    ) -> Any:
        """Call ``hook`` through ``facade``; fail on an invalid answer or a mutated argument."""
        method, names = _CALLS[hook]
        shown = args if shown is None else shown
        before = [_snapshot(arg) for arg in args]
        try:
            result = getattr(facade, method)(*args)
        except PolicyDecisionError as exc:
            problem = str(exc).removeprefix(f"policy {self.name!r}, hook {hook}: ")
            self.fail(hook, problem, shown, where)
        changed = [n for n, b, a in zip(names, before, args, strict=True) if _snapshot(a) != b]
        if changed:
            problem = f"mutated its argument {', '.join(changed)}; hook arguments are read-only"
            self.fail(hook, problem, shown, where)
        return result

    def check_call(self, hook: str, args: tuple[Any, ...]) -> None:
        """One state: valid, non-mutating, and the same answer from two fresh instances."""
        first = self.invoke(self.facade(), hook, copy.deepcopy(args), shown=args)
        second = self.invoke(self.facade(), hook, copy.deepcopy(args), shown=args)
        if _normalize(first) != _normalize(second):
            self.fail(
                hook,
                f"not deterministic: two fresh instances answered {_normalize(first)!r} and"
                f" {_normalize(second)!r} on equal states",
                args,
            )


def _snapshot(value: object) -> object:
    """A comparable copy of everything a hook argument holds."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_snapshot(item) for item in value))
    if isinstance(value, RequestState | EngineState | BlockState):
        return (type(value).__name__, tuple(getattr(value, s) for s in value.__slots__))
    if isinstance(value, ReplicaState):
        return ("ReplicaState", value.index, _snapshot(value.engine), dict(value.cached))
    if isinstance(value, StepReport):
        return tuple(_snapshot(getattr(value, f.name)) for f in dataclasses.fields(value))
    return value


def _normalize(result: object) -> object:
    """A decision in terms that compare across two equal states: ids, not objects."""
    if isinstance(result, list):
        return tuple(_identity(item) for item in result)
    if isinstance(result, Admission):
        return "admit" if result.admitted else ("reject", result.reason)
    return result


def _identity(item: object) -> object:
    if isinstance(item, BlockState):
        return item.block_hash
    return getattr(item, "request_id", item)


def _describe(names: Sequence[str], args: Sequence[object]) -> str:
    return "\n".join(f"  {name} = {_format(arg)}" for name, arg in zip(names, args, strict=True))


def _format(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + "".join(f"\n      {_format(item)}," for item in value) + "\n    ]"
    if isinstance(value, ReplicaState):
        return f"ReplicaState({value.index}, {_format(value.engine)}, cached={value.cached})"
    if isinstance(value, RequestState | EngineState | BlockState):
        names = sorted(value.__slots__, key=lambda s: s != "request_id")  # the id first
        fields = ", ".join(f"{s}={_short(getattr(value, s))}" for s in names)
        return f"{type(value).__name__}({fields})"
    if isinstance(value, StepReport):
        fields = ", ".join(
            f"{f.name}={_format(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"StepReport({fields})"
    return repr(value)
