"""The one typed caller of the policy hooks.

Engines and adapters talk to policies only through ``PolicyFacade``. It consults the
selected policies in configured order, validates every decision, and isolates faults: a
hook that raises or answers nonsense is logged once per (policy, hook), counted, and
skipped, so the next policy or the engine default decides. A request is never lost
because of a policy: the engine receives a copy the facade built from the answer, of the
engine's own objects, never the policy's object. A hook no selected policy implements is
never called: check the ``has_*`` flags before building arguments on a hot path.
"""

from __future__ import annotations

import logging
import math
import re
import time
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

# What a policy may raise and still not stop the engine: everything but the two that ask
# the process to stop (Ctrl-C, sys.exit), which must keep working inside a hook.
PROPAGATED = (KeyboardInterrupt, SystemExit)
MAX_SHOWN = 200  # characters of an exception or answer in a fault message


class _Invalid(Exception):
    """An answer that fails validation; its message is the logged problem."""


class PolicyFacade:
    """Selected policies behind one typed method per hook."""

    def __init__(
        self,
        policies: Sequence[tuple[str, Policy]],
        *,
        strict: bool = False,
        hook_budget_ms: float | None = None,
    ) -> None:
        self.policies = list(policies)
        self.strict = strict
        self.errors: Counter[tuple[str, str]] = Counter()
        self.slow_calls: Counter[tuple[str, str]] = Counter()
        self.hook_budget_ms = _budget_ms(hook_budget_ms)
        self._budget_s = None if self.hook_budget_ms is None else self.hook_budget_ms / 1000
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
        hook_budget_ms: float | None = None,
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
        budget = cfg.hook_budget_ms if hook_budget_ms is None else hook_budget_ms
        return cls(policies, strict=strict, hook_budget_ms=budget)

    @property
    def label(self) -> str:
        return "+".join(name for name, _ in self.policies)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def slow_call_count(self) -> int:
        return sum(self.slow_calls.values())

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
            if self._budget_s is not None:  # else nothing is timed
                fn = self._timed(impl.plugin_name, hook, fn, self._budget_s)
            impls.append((impl.plugin_name, fn))
        return impls

    def _fault(
        self, policy: str, hook: str, problem: str, cause: BaseException | None = None
    ) -> None:
        key = (policy, hook)
        self.errors[key] += 1
        if self.strict:
            raise PolicyDecisionError(f"policy {policy!r}, hook {hook}: {problem}") from cause
        if self.errors[key] == 1:
            log.warning(
                "schedkit: policy %r, hook %s: %s; using the next policy or the engine"
                " default (logged once, counted in policy_errors)",
                policy,
                hook,
                problem,
            )

    def _slow(self, policy: str, hook: str, elapsed_s: float) -> None:
        key = (policy, hook)
        self.slow_calls[key] += 1
        if self.slow_calls[key] == 1:
            log.warning(
                "schedkit: policy %r, hook %s: took %.3f ms, over the %g ms hook budget;"
                " its answer is still used (logged once, counted in slow_calls)",
                policy,
                hook,
                elapsed_s * 1000,
                self.hook_budget_ms,
            )

    def _timed(
        self, policy: str, hook: str, fn: Callable[..., Any], budget_s: float
    ) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:  # raising late is slow too
                elapsed = time.perf_counter() - started
                if elapsed > budget_s:
                    self._slow(policy, hook, elapsed)

        return timed

    def _decide(self, hook: str, args: tuple[Any, ...], check: Callable[[Any], T]) -> T | None:
        """The first valid answer, as ``check`` copied it; ``check`` raises ``_Invalid``."""
        for policy, fn in self._impls[hook]:
            try:
                result = fn(*args)
            except PROPAGATED:
                raise
            except BaseException as exc:  # GeneratorExit, CancelledError... from a policy too
                self._fault(policy, hook, f"raised {describe_exception(exc)}", exc)
                continue
            if result is None:
                continue
            try:
                return check(result)
            except _Invalid as invalid:
                self._fault(policy, hook, str(invalid))
            except PROPAGATED:
                raise
            except BaseException as exc:  # the answer broke validation itself
                problem = f"returned an invalid {type_name(result)}: {describe_exception(exc)}"
                self._fault(policy, hook, problem, exc)
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
        result = self._decide("admit_request", (request, engine), _admission)
        return result if result is not None else ADMIT

    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView] | None:
        """A new order of the waiting queue, or None to keep the engine's."""
        if not self.has_order or not waiting:
            return None
        pool = _Pool(waiting)  # before the call: a policy may change the list it was given
        return self._decide("order_waiting", (waiting, engine), pool.permutation)

    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        """This step's limits: the policy's, or ``default``."""
        if not self.has_plan:
            return default
        limits = (default.token_budget, default.max_running, default.prefill_chunk)

        def check(result: Any) -> BatchBudget:
            return _budget(result, *limits)

        # Policies get a copy: the engine's default stays the engine's.
        result = self._decide("plan_batch", (engine, BatchBudget(*limits)), check)
        return result if result is not None else default

    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView] | None:
        """Preemption victims in order, or None for the engine default."""
        if not self.has_victims:
            return None
        pool = _Pool(running)

        def check(result: Any) -> list[RequestView]:
            return pool.subset(result, "running request", 0)

        return self._decide("select_victims", (running, needing, engine), check)

    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView] | None:
        """Cached blocks to evict in order, or None for LRU."""
        if not self.has_evictions or not candidates:
            return None
        pool = _Pool(candidates)

        def check(result: Any) -> list[BlockView]:
            return pool.subset(result, "evictable block", num_blocks)

        return self._decide("select_evictions", (candidates, num_blocks, engine), check)

    # -- observation ----------------------------------------------------------------

    def step_finished(self, report: StepReport, engine: EngineView) -> None:
        self._observe("on_step_finished", (report, engine))

    def request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._observe("on_request_finished", (request, reason, engine))

    def _observe(self, hook: str, args: tuple[Any, ...]) -> None:
        for policy, fn in self._impls[hook]:
            try:
                fn(*args)
            except PROPAGATED:
                raise
            except BaseException as exc:
                self._fault(policy, hook, f"raised {describe_exception(exc)}", exc)


def _reorder(fn: Callable[..., Any], indices: list[int]) -> Callable[..., Any]:
    """Adapt an implementation that takes a subset of the spec's arguments."""

    def call(*args: Any) -> Any:
        return fn(*[args[i] for i in indices])

    return call


def by_hook(counts: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """A facade counter (``errors``, ``slow_calls``) keyed ``"policy.hook"``, zeros left out."""
    return {f"{policy}.{hook}": n for (policy, hook), n in counts.items() if n}


def _budget_ms(value: float | None) -> float | None:
    if value is None:
        return None
    try:
        ms = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:  # an int too large for a float
        ms = math.nan
    if not 0 < ms < math.inf:
        raise PolicyConfigError(
            f"hook_budget_ms must be a positive number of milliseconds or None (off),"
            f" not {show(value)}"
        )
    return ms


# -- formatting that cannot raise ---------------------------------------------------------

_type_name = type.__dict__["__name__"].__get__  # not the metaclass's, which may lie


def type_name(obj: object) -> str:
    """The name of ``obj``'s type; never raises."""
    try:
        return _truncate(str.__str__(_type_name(type(obj))))
    except PROPAGATED:
        raise
    except BaseException:
        return "?"


def show(obj: object, *, prefer_str: bool = False) -> str:
    """``repr(obj)`` (or ``str`` first), falling back to the other, then to a placeholder;
    at most ``MAX_SHOWN`` characters. Never raises, whatever ``obj``'s methods do."""
    if type(obj) is int and obj.bit_length() > 600:  # str() refuses over 4,300 digits
        return f"<{obj.bit_length()}-bit int>"
    for fmt in (str, repr) if prefer_str else (repr, str):
        try:
            # str.__str__ makes an exact str of a str subclass whose methods may lie.
            return _truncate(str.__str__(fmt(obj)))
        except PROPAGATED:
            raise
        except BaseException:
            continue
    return f"<unprintable {type_name(obj)}>"


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` (just the name when the message is empty); never raises."""
    text = show(exc, prefer_str=True)
    return f"{type_name(exc)}: {text}" if text else type_name(exc)


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


# -- validation: each check returns the engine's copy of a valid answer -------------------


class _Pool:
    """The engine's items at call time, which an answer may name (by identity)."""

    __slots__ = ("_ids", "items")

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = tuple(items)
        self._ids: set[int] | None = None

    @property
    def ids(self) -> set[int]:
        if self._ids is None:  # built once per facade call, only when a policy answers
            self._ids = set(map(id, self.items))
        return self._ids

    def permutation(self, result: Any) -> list[Any]:
        items = _plain_list(result, "expected a list of the waiting requests")
        if len(items) != len(self.items):
            raise _Invalid(
                f"returned {len(items)} requests for a waiting queue of {len(self.items)}"
            )
        if set(map(id, items)) != self.ids:
            raise _Invalid(
                "did not return a permutation of the waiting queue (unknown or repeated request)"
            )
        return items

    def subset(self, result: Any, what: str, at_least: int) -> list[Any]:
        items = _plain_list(result, "expected a list or None")
        ids = set(map(id, items))
        if len(ids) != len(items):
            raise _Invalid(f"named the same {what} twice")
        if not ids <= self.ids:
            raise _Invalid(f"named something that is not a {what}")
        if len(items) < at_least:
            raise _Invalid(f"returned {len(items)} items, at least {at_least} needed")
        return items


def _plain_list(result: Any, expected: str) -> list[Any]:
    """A new plain list of what ``result`` holds. A list subclass is read as the list it
    stores: none of its methods runs (``__iter__``, ``__len__``, ``__getitem__``...), so
    what is validated is what the engine gets. ``isinstance`` would trust ``__class__``."""
    if not issubclass(type(result), list):
        raise _Invalid(f"returned {type_name(result)}, {expected}")
    return list.copy(result)


_CODE = re.compile(r"[a-z0-9_]{1,40}")  # Admission.code: a metric label, or nothing


def _admission(result: Any) -> Admission:
    if not issubclass(type(result), Admission):
        raise _Invalid(f"returned {type_name(result)}, expected Admission or None")
    admitted, reason = result.admitted, result.reason  # each read once
    code = getattr(result, "code", "")
    if type(admitted) is not bool:
        raise _Invalid(f"returned admitted={show(admitted)}; Admission.admitted must be a bool")
    text = str.__str__(reason) if issubclass(type(reason), str) else ""
    if admitted:
        return Admission(True, text) if text else ADMIT
    if not text:
        raise _Invalid("rejected without a reason; use Admission.reject('why')")
    label = str.__str__(code) if issubclass(type(code), str) else ""
    return Admission(False, text, label if _CODE.fullmatch(label) else "")


def _budget(result: Any, token_budget: int, max_running: int, prefill_chunk: int) -> BatchBudget:
    if not issubclass(type(result), BatchBudget):
        raise _Invalid(f"returned {type_name(result)}, expected BatchBudget or None")
    tokens, running, chunk = result.token_budget, result.max_running, result.prefill_chunk
    if type(tokens) is not int or type(running) is not int or type(chunk) is not int:
        fields = zip(_BUDGET_FIELDS, (tokens, running, chunk), strict=True)
        name, value = next((n, v) for n, v in fields if type(v) is not int)
        raise _Invalid(  # a bool, a float or an int subclass is not an int
            f"returned BatchBudget.{name}={show(value)} ({type_name(value)});"
            " BatchBudget fields must be ints"
        )
    if not 1 <= tokens <= token_budget:
        raise _Invalid(f"token_budget {show(tokens)} outside 1..{token_budget}")
    if not 1 <= running <= max_running:
        raise _Invalid(f"max_running {show(running)} outside 1..{max_running}")
    cap = prefill_chunk
    if chunk < 0 or (cap and not 1 <= chunk <= cap):
        raise _Invalid(f"prefill_chunk {show(chunk)} outside {f'1..{cap}' if cap else '>= 0'}")
    return BatchBudget(tokens, running, chunk)


_BUDGET_FIELDS = ("token_budget", "max_running", "prefill_chunk")
