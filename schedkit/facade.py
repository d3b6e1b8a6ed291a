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

import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pluggy
from pydantic import ValidationError

from schedkit import hookspecs
from schedkit.answers import (
    MAX_SHOWN,
    UNKEYED,
    Invalid,
    Pool,
    admission,
    budget,
    canonical_key,
    describe_exception,
    flat_key,
    flat_plain,
    replica_index,
    show,
    stops_process,
    type_name,
)
from schedkit.config import SchedkitConfig, load_config
from schedkit.decisions import ADMIT, Admission, BatchBudget, StepReport
from schedkit.errors import PluginLoadError, PolicyConfigError, PolicyDecisionError
from schedkit.keyed import WaitingOrder
from schedkit.plugins import PolicyRegistry
from schedkit.policy import Policy
from schedkit.policy_thread import HookBusy, HookRaised, HookTimeout, PolicyThread
from schedkit.validation import options_error
from schedkit.views import BLOCK_FIELDS, BlockView, EngineView, ReplicaView, RequestView

__all__ = ["MAX_SHOWN", "PolicyFacade", "by_hook"]


log = logging.getLogger("schedkit")

T = TypeVar("T")
Impl = tuple[str, Callable[..., Any]]


def _check_unmarked(name: str, policy: object) -> None:
    """A method named after a hook but without ``@hookimpl`` is never called: the policy
    would silently run without it. Refuse it at load, naming the fix."""
    unmarked = [
        hook
        for hook in hookspecs.HOOK_NAMES
        if callable(method := getattr(policy, hook, None))
        and getattr(method, f"{hookspecs.PROJECT}_impl", None) is None
    ]
    if unmarked:
        methods = ", ".join(f"{hook}()" for hook in unmarked)
        raise PluginLoadError(
            f"policy {name!r} defines {methods} without @hookimpl, so no engine would call"
            f" {'it' if len(unmarked) == 1 else 'them'}: decorate each with"
            " @schedkit.hookimpl, or give a helper another name (e.g. a leading underscore)"
        )


class PolicyFacade:
    """Selected policies behind one typed method per hook."""

    # Shown a decision's arguments before the policies decide (the contract suite's
    # recorder sets it, to see what an engine shows its policies); None costs nothing.
    watch: Callable[[str, tuple[Any, ...]], None] | None = None

    def __init__(
        self,
        policies: Sequence[tuple[str, Policy]],
        *,
        strict: bool = False,
        hook_budget_ms: float | None = None,
        hook_budget_hard: bool = False,
    ) -> None:
        self.policies = list(policies)
        self.strict = strict
        self.errors: Counter[tuple[str, str]] = Counter()
        self.slow_calls: Counter[tuple[str, str]] = Counter()
        # A hard budget's faults, also counted in ``errors``: calls abandoned past the
        # budget (also slow calls), and calls not made while an abandoned one ran on.
        self.abandoned_calls: Counter[tuple[str, str]] = Counter()
        self.bypassed_calls: Counter[tuple[str, str]] = Counter()
        self.hook_budget_ms = _budget_ms(hook_budget_ms)
        self.hook_budget_hard = _budget_hard(hook_budget_hard, self.hook_budget_ms)
        self._budget_s = None if self.hook_budget_ms is None else self.hook_budget_ms / 1000
        self._threads: dict[str, PolicyThread] = {}  # hard budget: one per policy
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        # pluggy calls the last registered first: register in reverse so the first
        # configured policy is consulted first.
        for name, policy in reversed(self.policies):
            _check_unmarked(name, policy)
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
        self.has_plan = "plan_batch" in self.implemented
        self.has_route = "route_request" in self.implemented
        self.has_waiting_key = "waiting_key" in self.implemented
        self.has_victim_key = "victim_key" in self.implemented
        self.has_eviction_key = "eviction_key" in self.implemented
        # Engines call order_waiting / select_victims / select_evictions when a policy
        # decides the order by the list hook, by keys, or both (the facade sorts by key);
        # an engine keeping its own key order needs only the list hooks' flags.
        self.has_order_list = "order_waiting" in self.implemented
        self.has_victims_list = "select_victims" in self.implemented
        self.has_evictions_list = "select_evictions" in self.implemented
        self.has_order = self.has_order_list or self.has_waiting_key
        self.has_victims = self.has_victims_list or self.has_victim_key
        self.has_evictions = self.has_evictions_list or self.has_eviction_key
        self.eviction_key_reads = self._key_reads()
        self._waiting_order = WaitingOrder()  # waiting_key: once per joining the queue
        # Step reports name preempted requests, whose waiting keys are asked again.
        self.has_step_observer = "on_step_finished" in self.implemented or self.has_waiting_key
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
        hook_budget_hard: bool | None = None,
    ) -> PolicyFacade:
        """Instantiate the configured policies (loading only those) behind a facade; a
        hook budget given here replaces the config's."""
        cfg = load_config(config)
        registry = registry or PolicyRegistry.discover()
        policies = []
        for name in cfg.policy:
            policy_cls = registry.load(name)
            try:
                options = policy_cls.Options.model_validate(cfg.options.get(name, {}))
            except ValidationError as exc:
                raise options_error(name, policy_cls.Options, exc) from exc
            policies.append((name, policy_cls(options)))
        budget = cfg.hook_budget_ms if hook_budget_ms is None else hook_budget_ms
        hard = cfg.hook_budget_hard if hook_budget_hard is None else hook_budget_hard
        return cls(policies, strict=strict, hook_budget_ms=budget, hook_budget_hard=hard)

    @property
    def label(self) -> str:
        return "+".join(name for name, _ in self.policies)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def slow_call_count(self) -> int:
        return sum(self.slow_calls.values())

    @property
    def abandoned_call_count(self) -> int:
        return sum(self.abandoned_calls.values())

    @property
    def bypassed_call_count(self) -> int:
        return sum(self.bypassed_calls.values())

    def _key_reads(self) -> frozenset[str] | None:
        """The block fields every ``eviction_key`` together reads (``Policy.
        eviction_key_reads``), or None when a policy keeps its fields undeclared."""
        reads: set[str] = set()
        for name, _ in self._impls["eviction_key"]:
            declared = getattr(self._pm.get_plugin(name), "eviction_key_reads", None)
            if declared is None:
                return None
            unknown = sorted(set(declared) - BLOCK_FIELDS)
            if unknown:
                raise PolicyConfigError(
                    f"policy {name!r}: eviction_key_reads names {', '.join(unknown)}, which"
                    f" no block has; use some of {', '.join(sorted(BLOCK_FIELDS))}"
                )
            reads.update(declared)
        return frozenset(reads)

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
            if self._budget_s is not None and self.hook_budget_hard:
                fn = functools.partial(self._thread(impl.plugin_name).call, fn)
            elif self._budget_s is not None:  # else nothing is timed
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

    def _raised(self, policy: str, hook: str, exc: BaseException) -> None:
        """The fault path for a hook call that raised, or ran past or was skipped under a
        hard budget; re-raises what asks the process to stop (``stops_process``)."""
        key = (policy, hook)
        if type(exc) is HookRaised:
            self._fault(policy, hook, f"raised {exc.description}", exc.exception)
        elif type(exc) is HookTimeout:
            self.slow_calls[key] += 1
            self.abandoned_calls[key] += 1
            problem = (
                f"took longer than the {self.hook_budget_ms:g} ms hard hook budget and was"
                " abandoned (it runs on; the policy is skipped until it returns)"
            )
            self._fault(policy, hook, problem)
        elif type(exc) is HookBusy:
            self.bypassed_calls[key] += 1
            self._fault(policy, hook, "skipped: an abandoned call of this policy runs on")
        elif stops_process(exc):
            raise exc
        else:
            self._fault(policy, hook, f"raised {describe_exception(exc)}", exc)

    def _thread(self, policy: str) -> PolicyThread:
        if policy not in self._threads:
            assert self._budget_s is not None
            self._threads[policy] = PolicyThread(policy, self._budget_s)
        return self._threads[policy]

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
        """The first valid answer, as ``check`` copied it; ``check`` raises ``Invalid``."""
        for policy, fn in self._impls[hook]:
            try:
                result = fn(*args)
            except BaseException as exc:  # GeneratorExit, CancelledError... from a policy too
                self._raised(policy, hook, exc)
                continue
            if result is None:
                continue
            try:
                return check(result)
            except Invalid as invalid:
                self._fault(policy, hook, str(invalid))
            except BaseException as exc:  # the answer broke validation itself
                if stops_process(exc):
                    raise
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
        result = self._decide("admit_request", (request, engine), admission)
        return result if result is not None else ADMIT

    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView, *, keyed: bool = False
    ) -> list[RequestView] | None:
        """A new order of the waiting queue, or None to keep the engine's: the queue
        sorted by ``waiting_key`` (ties keep the engine's order), then the list hook's
        answer on that order, if it gives one. ``keyed``: the engine keeps its queue in
        key order itself (calling ``waiting_key`` when a request joins), so only the list
        hook is consulted."""
        if not self.has_order or not waiting:
            return None
        ordered = None
        if self.has_waiting_key and not keyed:
            ordered = self._waiting_order.sort(
                waiting, lambda view: self._key("waiting_key", (view, engine))
            )
        if self.has_order_list:
            shown = waiting if ordered is None else ordered
            pool = Pool(shown)  # before the call: a policy may change the list it was given
            answer = self._decide("order_waiting", (shown, engine), pool.permutation)
            if answer is not None:
                return answer
        return ordered

    def plan_batch(self, engine: EngineView, default: BatchBudget) -> BatchBudget:
        """This step's limits: the policy's, or ``default``."""
        if not self.has_plan:
            return default
        limits = (default.token_budget, default.max_running, default.prefill_chunk)

        def check(result: Any) -> BatchBudget:
            return budget(result, *limits)

        # Policies get a copy: the engine's default stays the engine's.
        result = self._decide("plan_batch", (engine, BatchBudget(*limits)), check)
        return result if result is not None else default

    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView] | None:
        """Preemption victims in order, or None for the engine default: the list hook's
        answer, else the running requests by ``victim_key`` (ties: later in the engine's
        order first, as its default takes the newest)."""
        if not self.has_victims:
            return None
        if self.watch is not None:
            self.watch("select_victims", (running, needing, engine))
        if self.has_victims_list:
            pool = Pool(running)

            def check(result: Any) -> list[RequestView]:
                return pool.subset(result, "running request", 0)

            answer = self._decide("select_victims", (running, needing, engine), check)
            if answer is not None or not self.has_victim_key:
                return answer
        n = len(running)
        keys = [self._key("victim_key", (r, engine)) for r in running]
        return [running[i] for i in sorted(range(n), key=lambda i: (keys[i], n - i))]

    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> list[BlockView] | None:
        """Cached blocks to evict in order, or None for LRU: the list hook's answer, else
        the candidates by ``eviction_key`` (ties: least recently used first). Engines
        that keep blocks in key order themselves call ``eviction_key`` instead."""
        if not self.has_evictions or not candidates:
            return None
        if self.has_evictions_list:
            pool = Pool(candidates)

            def check(result: Any) -> list[BlockView]:
                return pool.subset(result, "evictable block", num_blocks)

            args = (candidates, num_blocks, engine)
            answer = self._decide("select_evictions", args, check)
            if answer is not None or not self.has_eviction_key:
                return answer
        keys = [self._key("eviction_key", (b, engine)) for b in candidates]
        return [candidates[i] for i in sorted(range(len(candidates)), key=keys.__getitem__)]

    def route(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int | None:
        """The replica ``request`` goes to, or None for the cluster's default."""
        if not self.has_route or not replicas:
            return None
        count = len(replicas)
        return self._decide(
            "route_request", (request, replicas), lambda result: replica_index(result, count)
        )

    # -- keys -----------------------------------------------------------------------

    def waiting_key(self, request: RequestView, engine: EngineView) -> tuple[Any, ...] | None:
        """The policies' combined key of a request joining the waiting queue (lower is
        admitted first), or None when no policy keys it: the engine's order stands."""
        if not self.has_waiting_key:
            return None
        return self._key("waiting_key", (request, engine))

    def victim_key(self, request: RequestView, engine: EngineView) -> tuple[Any, ...] | None:
        """The policies' combined key of a running request (lower is preempted first),
        or None when no policy keys victims."""
        if not self.has_victim_key:
            return None
        return self._key("victim_key", (request, engine))

    def eviction_key(self, block: BlockView, engine: EngineView) -> tuple[Any, ...] | None:
        """The policies' combined key of an evictable block (lower is evicted first), or
        None when no policy keys blocks: least recently used first."""
        if not self.has_eviction_key:
            return None
        return self._key("eviction_key", (block, engine))

    def _key(self, hook: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """One canonical component per implementing policy, in configured order (the
        engine appends its own order): a policy's key, or ``UNKEYED`` (after every key)
        when it has none for this item, raised, or returned something that is no key."""
        parts = []
        for policy, fn in self._impls[hook]:
            try:
                result = fn(*args)
                parts.append(UNKEYED if result is None else (0, canonical_key(result)))
            except BaseException as exc:
                parts.append(self._unkeyed(policy, hook, exc))
        return tuple(parts)

    def flat_eviction_key(self, block: BlockView, engine: EngineView) -> tuple[Any, ...]:
        """``flat_key(eviction_key(block, engine) or ())``, built without the nested key
        (the simulator's eviction heaps keep flat keys): a policy's plain key, a tuple of
        numbers, is checked and flattened in one pass, about twice as fast."""
        out: list[Any] = []
        for policy, fn in self._impls["eviction_key"]:
            try:
                result = fn(block, engine)
                plain = flat_plain(result)
                if plain is not None:
                    out += plain
                else:
                    out += flat_key((UNKEYED if result is None else (0, canonical_key(result)),))
            except BaseException as exc:
                out += self._unkeyed(policy, "eviction_key", exc)
        return tuple(out)

    def _unkeyed(self, policy: str, hook: str, exc: BaseException) -> tuple[int]:
        """``UNKEYED`` for a key hook that raised or returned no key (``Invalid``)."""
        if isinstance(exc, Invalid):
            self._fault(policy, hook, str(exc))
        else:
            self._raised(policy, hook, exc)
        return UNKEYED

    # -- observation ----------------------------------------------------------------

    def step_finished(self, report: StepReport, engine: EngineView) -> None:
        if report.preempted and self.has_waiting_key:
            self._waiting_order.rejoin(report.preempted)  # each is keyed again
        self._observe("on_step_finished", (report, engine))

    def request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._observe("on_request_finished", (request, reason, engine))

    def _observe(self, hook: str, args: tuple[Any, ...]) -> None:
        for policy, fn in self._impls[hook]:
            try:
                fn(*args)
            except BaseException as exc:
                self._raised(policy, hook, exc)


def _reorder(fn: Callable[..., Any], indices: list[int]) -> Callable[..., Any]:
    """Adapt an implementation that takes a subset of the spec's arguments."""

    def call(*args: Any) -> Any:
        return fn(*[args[i] for i in indices])

    return call


def by_hook(counts: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """A facade counter (``errors``, ``slow_calls``...) keyed ``"policy.hook"``, zeros left out."""
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


def _budget_hard(value: bool, budget_ms: float | None) -> bool:
    if type(value) is not bool:
        raise PolicyConfigError(f"hook_budget_hard must be True or False, not {show(value)}")
    if value and budget_ms is None:
        raise PolicyConfigError(
            "hook_budget_hard=True needs a budget: give hook_budget_ms too (milliseconds,"
            " e.g. hook_budget_ms=10)"
        )
    return value
