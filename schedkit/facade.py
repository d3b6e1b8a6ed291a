"""The one typed caller of the policy hooks.

Engines and adapters talk to policies only through ``PolicyFacade``. It consults the
selected policies in configured order, validates every decision, and isolates faults: a
hook that raises or answers nonsense is logged once per (policy, hook), counted, and
skipped, so the next policy or the engine default decides. A request is never lost
because of a policy. A hook no selected policy implements is never called: check the
``has_*`` flags before building arguments on a hot path.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pluggy
from pydantic import ValidationError

from schedkit import hookspecs
from schedkit.config import SchedkitConfig, load_config
from schedkit.decisions import ADMIT, Admission, BatchBudget, StepReport
from schedkit.errors import PluginLoadError, PolicyConfigError, PolicyDecisionError
from schedkit.plugins import PolicyRegistry
from schedkit.policy import Policy
from schedkit.views import BlockView, EngineView, RequestView

log = logging.getLogger("schedkit")

T = TypeVar("T")
Impl = tuple[str, Callable[..., Any]]


class PolicyFacade:
    """Selected policies behind one typed method per hook."""

    def __init__(
        self,
        policies: Sequence[tuple[str, Policy]],
        *,
        strict: bool = False,
    ) -> None:
        self.policies = list(policies)
        self.strict = strict
        self.errors: Counter[tuple[str, str]] = Counter()
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        # pluggy calls the last registered first: register in reverse so the first
        # configured policy is consulted first.
        for name, policy in reversed(self.policies):
            try:
                self._pm.register(policy, name=name)
                self._pm.check_pending()
            except pluggy.PluginValidationError as exc:
                raise PluginLoadError(
                    f"policy {name!r} has an invalid hook: {exc}."
                    f" Hooks are: {', '.join(hookspecs.HOOK_NAMES)}"
                ) from exc
        self._impls = {name: self._collect(name) for name in hookspecs.HOOK_NAMES}
        self.implemented = frozenset(n for n, impls in self._impls.items() if impls)
        self.has_admit = "admit_request" in self.implemented
        self.has_order = "order_waiting" in self.implemented
        self.has_plan = "plan_batch" in self.implemented
        self.has_victims = "select_victims" in self.implemented
        self.has_evictions = "select_evictions" in self.implemented
        self.has_step_observer = "on_step_finished" in self.implemented
        self.has_finish_observer = "on_request_finished" in self.implemented
        self.has_arrival_observer = "on_request_arrived" in self.implemented
        # Engines call ``admit`` for every arrival when this is set, else never.
        self.sees_arrivals = self.has_admit or self.has_arrival_observer

    @classmethod
    def from_config(
        cls,
        config: SchedkitConfig | Mapping[str, Any] | str | None = None,
        *,
        registry: PolicyRegistry | None = None,
        strict: bool = False,
    ) -> PolicyFacade:
        """Instantiate the configured policies (loading only those) behind a facade."""
        cfg = load_config(config)
        registry = registry or PolicyRegistry.discover()
        policies = []
        for name in cfg.policy:
            policy_cls = registry.load(name)
            try:
                options = policy_cls.Options.model_validate(cfg.options.get(name, {}))
            except ValidationError as exc:
                fields = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or '(options)'}: {e['msg']}"
                    for e in exc.errors()
                )
                raise PolicyConfigError(f"bad options for policy {name!r}: {fields}") from exc
            policies.append((name, policy_cls(options)))
        return cls(policies, strict=strict)

    @property
    def label(self) -> str:
        return "+".join(name for name, _ in self.policies)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def _collect(self, hook: str) -> list[Impl]:
        """The hook's implementations in configured policy order. pluggy would move an
        implementation marked ``tryfirst``/``trylast`` ahead of or behind the others;
        schedkit's configuration alone decides who is consulted first."""
        caller = getattr(self._pm.hook, hook)
        spec_args = list(caller.spec.argnames)
        rank = {name: i for i, (name, _) in enumerate(self.policies)}
        hookimpls = sorted(caller.get_hookimpls(), key=lambda impl: rank[impl.plugin_name])
        impls: list[Impl] = []
        for impl in hookimpls:
            if impl.hookwrapper or impl.wrapper:
                raise PluginLoadError(
                    f"policy {impl.plugin_name!r}: hook {hook} is marked as a wrapper;"
                    " schedkit calls each policy's hooks directly, drop wrapper=True"
                )
            fn = impl.function
            if list(impl.argnames) != spec_args:
                fn = _reorder(fn, [spec_args.index(a) for a in impl.argnames])
            impls.append((impl.plugin_name, fn))
        return impls

    def _fault(self, policy: str, hook: str, problem: str) -> None:
        key = (policy, hook)
        self.errors[key] += 1
        if self.strict:
            raise PolicyDecisionError(f"policy {policy!r}, hook {hook}: {problem}")
        if self.errors[key] == 1:
            log.warning(
                "schedkit: policy %r, hook %s: %s; using the next policy or the engine"
                " default (logged once, counted in policy_errors)",
                policy,
                hook,
                problem,
            )

    def _decide(self, hook: str, args: tuple[Any, ...], check: Callable[[Any], str | None]) -> Any:
        for policy, fn in self._impls[hook]:
            try:
                result = fn(*args)
            except Exception as exc:
                self._fault(policy, hook, f"raised {type(exc).__name__}: {exc}")
                continue
            if result is None:
                continue
            try:
                problem = check(result)
            except Exception as exc:  # a malformed answer that breaks validation itself
                problem = f"returned an invalid {type(result).__name__}: {exc}"
            if problem is None:
                return result
            self._fault(policy, hook, problem)
        return None

    # -- decisions ------------------------------------------------------------------

    def admit(self, request: RequestView, engine: EngineView) -> Admission:
        """A new request arrived: tell the arrival observers, then decide its admission
        (admits when no policy has an opinion). Engines call this once per request they
        receive, when ``sees_arrivals`` is set."""
        if self.has_arrival_observer:
            self._observe("on_request_arrived", (request, engine))
        if not self.has_admit:
            return ADMIT
        result = self._decide("admit_request", (request, engine), _check_admission)
        return result if result is not None else ADMIT

    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView] | None:
        """A new order of the waiting queue, or None to keep the engine's."""
        if not self.has_order or not waiting:
            return None

        def check(result: Any) -> str | None:
            return _check_permutation(result, waiting)

        return self._decide("order_waiting", (waiting, engine), check)  # type: ignore[no-any-return]

    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        """This step's limits: the policy's, or ``default``."""
        if not self.has_plan:
            return default

        def check(result: Any) -> str | None:
            return _check_budget(result, default)

        result = self._decide("plan_batch", (engine, default), check)
        return result if result is not None else default

    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView] | None:
        """Preemption victims in order, or None for the engine default."""
        if not self.has_victims:
            return None

        def check(result: Any) -> str | None:
            return _check_subset(result, running, "running request", 0)

        return self._decide("select_victims", (running, needing, engine), check)  # type: ignore[no-any-return]

    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView] | None:
        """Cached blocks to evict in order, or None for LRU."""
        if not self.has_evictions or not candidates:
            return None

        def check(result: Any) -> str | None:
            return _check_subset(result, candidates, "evictable block", num_blocks)

        return self._decide("select_evictions", (candidates, num_blocks, engine), check)  # type: ignore[no-any-return]

    # -- observation ----------------------------------------------------------------

    def step_finished(self, report: StepReport, engine: EngineView) -> None:
        self._observe("on_step_finished", (report, engine))

    def request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._observe("on_request_finished", (request, reason, engine))

    def _observe(self, hook: str, args: tuple[Any, ...]) -> None:
        for policy, fn in self._impls[hook]:
            try:
                fn(*args)
            except Exception as exc:
                self._fault(policy, hook, f"raised {type(exc).__name__}: {exc}")


def _reorder(fn: Callable[..., Any], indices: list[int]) -> Callable[..., Any]:
    """Adapt an implementation that takes a subset of the spec's arguments."""

    def call(*args: Any) -> Any:
        return fn(*[args[i] for i in indices])

    return call


def _check_admission(result: Any) -> str | None:
    if not isinstance(result, Admission):
        return f"returned {type(result).__name__}, expected Admission or None"
    if not isinstance(result.admitted, bool):
        return f"returned {result!r}; Admission.admitted must be a bool"
    if not result.admitted and not (isinstance(result.reason, str) and result.reason):
        return "rejected without a reason; use Admission.reject('why')"
    return None


def _check_permutation(result: Any, waiting: Sequence[RequestView]) -> str | None:
    if not isinstance(result, list):
        return f"returned {type(result).__name__}, expected a list of the waiting requests"
    if len(result) != len(waiting):
        return f"returned {len(result)} requests for a waiting queue of {len(waiting)}"
    if set(map(id, result)) != set(map(id, waiting)):
        return "did not return a permutation of the waiting queue (unknown or repeated request)"
    return None


def _check_subset(result: Any, pool: Sequence[Any], what: str, at_least: int) -> str | None:
    if not isinstance(result, list):
        return f"returned {type(result).__name__}, expected a list or None"
    ids = set(map(id, result))
    if len(ids) != len(result):
        return f"named the same {what} twice"
    if not ids <= set(map(id, pool)):
        return f"named something that is not a {what}"
    if len(result) < at_least:
        return f"returned {len(result)} items, at least {at_least} needed"
    return None


def _check_budget(result: Any, default: BatchBudget) -> str | None:
    if not isinstance(result, BatchBudget):
        return f"returned {type(result).__name__}, expected BatchBudget or None"
    fields = (result.token_budget, result.max_running, result.prefill_chunk)
    if any(type(v) is not int for v in fields):
        return f"returned {result!r}; BatchBudget fields must be ints"
    if not 1 <= result.token_budget <= default.token_budget:
        return f"token_budget {result.token_budget} outside 1..{default.token_budget}"
    if not 1 <= result.max_running <= default.max_running:
        return f"max_running {result.max_running} outside 1..{default.max_running}"
    cap = default.prefill_chunk
    if result.prefill_chunk < 0 or (cap and not 1 <= result.prefill_chunk <= cap):
        return f"prefill_chunk {result.prefill_chunk} outside {'1..' + str(cap) if cap else '>= 0'}"
    return None
