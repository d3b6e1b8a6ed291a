"""The policy inside LMDeploy's PyTorch-engine scheduler: class patches, no fork.

``install(scheduler, facade)`` checks the LMDeploy version, patches the classes once per
process and gives ``scheduler`` its ``LmdeployRuntime``. Each patched method looks the
runtime up on its own object (``schedkit``) and runs LMDeploy's code unchanged when
there is none, so schedulers built without a config stay stock. Nothing is patched
until a config selects a policy (``activate_from_environ`` in the engine process).

What is patched, and what LMDeploy does without it:

- arrivals: ``Scheduler.add_session`` tags the session; ``SchedulerSession.add_sequence``
  observes the new sequence and asks ``admit_request`` (a rejected one is stopped);
- waiting order: ``_PrefillReorderer.reorder`` (FCFS by ``arrive_time``; shortest first
  on a turn that excludes long prompts; on a turn for long work, one long prompt first,
  the fewest chunks first); with an ordering policy, ``order_waiting`` /
  ``waiting_key`` order the queue instead, within LMDeploy's lanes (a long turn still
  starts with a long prompt: the first in the policy's order);
- batch budget: ``_PrefillScheduler.schedule`` runs with ``max_batches`` from
  ``plan_batch`` (a copy of the config, for that call), and its token-budget gate
  (``_PrefillAdmissionAttempt._apply_prefill_token_budget_gate``) holds later prefills
  of the batch to ``token_budget``;
- victims: ``Scheduler.schedule_running``. LMDeploy walks the running sequences from
  the newest and preempts the one that cannot grow; with a victim policy the one that
  cannot grow first preempts the policy's victims, in order, until it fits;
- prefix-cache eviction: ``KVBlockLifecycle.evict`` (``schedkit_lmdeploy.eviction``);
- hits: ``BlockTrie._match_block_prefix`` notes the nodes a match found (counted when
  the sequence is dispatched: a rolled-back match is no hit);
- steps, preemptions and finishes: ``Scheduler.activate_seqs``, ``preempt_seqs``,
  ``stop_session`` and ``end_session``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from typing import Any

from schedkit.capabilities import warn_unsupported
from schedkit.facade import PolicyFacade
from schedkit.trust import TrustConfig

from schedkit_lmdeploy import compat, eviction
from schedkit_lmdeploy.carrier import request_meta_of
from schedkit_lmdeploy.runtime import LmdeployRuntime

__all__ = ["activate_from_environ", "install", "installed"]

log = logging.getLogger("schedkit.lmdeploy")

_STOCK: dict[str, Callable[..., Any]] = {}  # "Class.method" -> LMDeploy's own function


def installed() -> bool:
    return bool(_STOCK)


def install(
    scheduler: Any, facade: PolicyFacade, trust: TrustConfig | None = None
) -> LmdeployRuntime:
    """Run ``facade``'s policies in ``scheduler`` (an LMDeploy ``Scheduler``) from now on;
    returns its runtime. Raises ``UnsupportedLmdeployError`` on another LMDeploy."""
    compat.check_version(compat.installed_version())
    _patch_classes()
    runtime = LmdeployRuntime(scheduler, facade, trust)
    scheduler.schedkit = runtime
    scheduler._prefill_scheduler.schedkit = runtime
    scheduler.block_trie.schedkit = runtime
    scheduler.block_trie._kv_lifecycle.schedkit = runtime
    warn_unsupported(facade, "lmdeploy")
    return runtime


def activate_from_environ() -> bool:
    """In an LMDeploy process: when ``SCHEDKIT_CONFIG`` or ``SCHEDKIT_POLICY`` selects a
    policy, every ``Scheduler`` built from now on gets a runtime with it, and requests
    carry their metadata to it (``schedkit_lmdeploy.carrier``: the api_server side too,
    where LMDeploy's server is importable). Returns whether a policy was selected
    (nothing is patched otherwise)."""
    from schedkit.adapter.environ import resolve_config

    config = resolve_config()
    if config is None:
        return False
    compat.check_version(compat.installed_version())
    facade = PolicyFacade.from_config(config)  # fails here on a bad config, before serving
    from lmdeploy.pytorch.paging import scheduler as module

    from schedkit_lmdeploy import carrier

    carrier.install_engine()
    try:
        carrier.install_api(config.trust)
    except ImportError as exc:  # LMDeploy's server is not installed: no api_server here
        log.info("schedkit: LMDeploy's api_server is not importable (%s): engine side only", exc)

    cls = module.Scheduler
    if "Scheduler.__init__" not in _STOCK:
        stock = _STOCK["Scheduler.__init__"] = cls.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            stock(self, *args, **kwargs)
            install(self, PolicyFacade.from_config(config), config.trust)

        cls.__init__ = init
    log.info("schedkit: LMDeploy schedulers run policy %s", facade.label)
    return True


def _patch(cls: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    key = f"{cls.__name__}.{name}"
    if key not in _STOCK:
        _STOCK[key] = cls.__dict__[name]
        setattr(cls, name, make(_STOCK[key]))


def _patch_classes() -> None:
    from lmdeploy.pytorch.messages import SchedulerSession
    from lmdeploy.pytorch.paging import prefill_scheduler as prefill
    from lmdeploy.pytorch.paging import scheduler as module
    from lmdeploy.pytorch.paging.block_trie import kv_lifecycle, trie

    cls = module.Scheduler
    _patch(cls, "add_session", _add_session)
    _patch(SchedulerSession, "add_sequence", _add_sequence)
    _patch(prefill._PrefillReorderer, "reorder", _reorder)
    _patch(prefill._PrefillScheduler, "schedule", _prefill_schedule)
    _patch(prefill._PrefillAdmissionAttempt, "_apply_prefill_token_budget_gate", _budget_gate)
    _patch(cls, "schedule_running", _schedule_running)
    _patch(cls, "activate_seqs", _activate_seqs)
    _patch(cls, "preempt_seqs", _preempt_seqs)
    _patch(cls, "stop_session", _stop_session)
    _patch(cls, "end_session", _end_session)
    _patch(trie.BlockTrie, "_match_block_prefix", _match_block_prefix)
    _patch(kv_lifecycle.KVBlockLifecycle, "evict", eviction.evict)


def _runtime(obj: Any) -> LmdeployRuntime | None:
    return getattr(obj, "schedkit", None)


# -- arrivals -----------------------------------------------------------------------


def _add_session(stock: Callable[..., Any]) -> Callable[..., Any]:
    def add_session(self: Any, session_id: int) -> Any:
        session = stock(self, session_id)
        runtime = _runtime(self)
        if runtime is not None:
            session.schedkit = runtime
        return session

    return add_session


def _add_sequence(stock: Callable[..., Any]) -> Callable[..., Any]:
    def add_sequence(self: Any, *args: Any, schedkit_meta: Any = None, **kwargs: Any) -> Any:
        """``schedkit_meta``: the request's ``schedkit`` mapping (request id, tenant,
        priority, SLO), kept in ``seq.meta`` before admission reads it."""
        seq = stock(self, *args, **kwargs)
        runtime = _runtime(self)
        if runtime is not None:
            if schedkit_meta is None:  # what the request carried to the engine process
                schedkit_meta = request_meta_of(kwargs.get("sampling_param"))
            if schedkit_meta is not None:
                seq.meta = schedkit_meta
            runtime.arrived(seq)
        return seq

    return add_sequence


# -- waiting order and budget -------------------------------------------------------


def _reorder(stock: Callable[..., Any]) -> Callable[..., Any]:
    def reorder(self: Any, waiting: list[Any], turn_policy: Any) -> list[Any]:
        """LMDeploy's lanes, in the policy's order. The policy orders the queue (in the
        order it last returned, then by arrival, as vLLM and the simulator keep their
        queues) once per turn; on a turn reserved for long work
        (``prefers_long_prefill`` with a long prompt waiting) the first long prompt in
        the policy's order goes first, as LMDeploy puts its own choice first, then the
        others and the other long prompts, each in the policy's order. On the other
        turns the policy's order replaces LMDeploy's (arrival, or shortest first on a
        turn that excludes long prompts; its admission still skips them there).
        Requests whose KV a connector has loaded stay first, as LMDeploy puts them.
        Without an opinion from the policy, LMDeploy's order stands."""
        order: list[Any] = stock(self, waiting, turn_policy)
        runtime = _runtime(self.prefill_scheduler)
        if runtime is None or not runtime.facade.has_order:
            return order
        loaded = self.prefill_scheduler.load_coordinator.is_remote_ready
        first = [seq for seq in order if loaded(seq)]
        rest = sorted((seq for seq in order if not loaded(seq)), key=runtime.queue_order)
        ranked = runtime.order(rest)
        if ranked is None:
            return order
        if turn_policy.prefers_long_prefill:
            split: tuple[list[Any], list[Any]] = self._split_by_prefill_kind(ranked)
            others, long = split  # LMDeploy's own split: the rest, then long prompts
            if long:
                return first + long[:1] + others + long[1:]
        return first + ranked

    return reorder


def _prefill_schedule(stock: Callable[..., Any]) -> Callable[..., Any]:
    def schedule(self: Any, **kwargs: Any) -> Any:
        """``max_running`` as ``max_batches`` (a copy of the config, for this call);
        ``token_budget`` at the token-budget gate (``_budget_gate``). LMDeploy's
        ``max_prefill_token_num`` keeps deciding what is a long prompt and how it is
        chunked: the engine loop's chunker reads it too."""
        runtime = _runtime(self)
        if runtime is None or not runtime.facade.has_plan or not kwargs.get("waiting"):
            return stock(self, **kwargs)
        budget = runtime.plan()
        if budget is None:
            return stock(self, **kwargs)
        saved = self.scheduler_config
        limits = copy.copy(saved)
        limits.max_batches = budget.max_running
        self.scheduler_config, runtime.turn_budget = limits, budget.token_budget
        try:
            return stock(self, **kwargs)
        finally:
            self.scheduler_config, runtime.turn_budget = saved, None

    return schedule


def _budget_gate(stock: Callable[..., Any]) -> Callable[..., Any]:
    def apply_gate(self: Any) -> Any:
        """LMDeploy's gate, then the policy's tighter budget the way LMDeploy applies its
        own: a prefill after the batch's first must fit, counted after a tentative prefix
        match when it does not fit without one (the cached prefix is not computed)."""
        rejection = stock(self)
        prefill = self.prefill_scheduler
        runtime = _runtime(prefill)
        budget = None if runtime is None else runtime.turn_budget
        if rejection is not None or budget is None or not self.batch_has_prefill:
            return rejection
        if self.batch_prefill_tokens + prefill._prefill_admission_token_count(self.seq) <= budget:
            return None
        refused = self._token_budget_rejection()
        if self._prefix_match.is_matched:  # matched already, and still too long
            self._prefix_match.rollback("exceeds the policy's prefill token budget")
            return refused
        if not self._try_match_prefix_for_prefill_gate():
            return refused
        if self.batch_prefill_tokens + prefill._prefill_admission_token_count(self.seq) > budget:
            self._prefix_match.rollback("exceeds the policy's prefill token budget")
            return refused
        self._accept_gate_enabling_match(refused)  # as LMDeploy: the match let it in
        return None

    return apply_gate


# -- preemption -------------------------------------------------------------------


def _schedule_running(stock: Callable[..., Any]) -> Callable[..., Any]:
    def schedule_running(
        self: Any, running: list[Any], num_required_tokens: int = 1, prealloc_size: int = 1
    ) -> list[bool]:
        runtime = _runtime(self)
        if runtime is None or not runtime.facade.has_victims:
            mask: list[bool] = stock(self, running, num_required_tokens, prealloc_size)
            return mask
        from torch.profiler import record_function

        with record_function("schedule_running"):  # LMDeploy's profiler scope, kept
            return _with_victims(self, runtime, running, num_required_tokens, prealloc_size)

    return schedule_running


def _with_victims(
    self: Any, runtime: LmdeployRuntime, running: list[Any], num_required_tokens: int,
    prealloc_size: int,
) -> list[bool]:  # fmt: skip
    """LMDeploy's ``schedule_running`` walk, where the sequence that cannot grow first
    preempts the policy's victims."""
    from lmdeploy.pytorch.messages import MessageStatus

    live_status = MessageStatus.RUNNING
    manager = self.block_manager

    def grow(seq: Any) -> bool:
        evictable = self.hanging + self.waiting
        if self.eviction_helper.try_make_capacity_for(seq, evictable, prealloc_size):
            manager.allocate(seq, prealloc_size)
            self.block_trie.allocate(seq)
            return True
        return False

    valid = [True] * len(running)
    for idx in reversed(range(len(running))):  # LMDeploy's walk: the newest first
        seq = running[idx]
        if seq.status != live_status:
            valid[idx] = False
            continue
        if manager.num_required_blocks(seq, num_required_tokens) == 0 or grow(seq):
            continue
        live = [s for s in running if s.status == live_status]
        position = {id(s): i for i, s in enumerate(running)}
        fitted = False
        for victim in runtime.victims(live, seq) or ():
            if victim is seq:
                runtime.victims_placed()
                break
            if victim.status != live_status:
                runtime.victims_skipped(1)
                continue
            self.preempt_seqs((victim,))
            valid[position[id(victim)]] = False
            runtime.victims_placed()
            if grow(seq):
                fitted = True
                break
        if not fitted:  # LMDeploy's default: the sequence that cannot grow goes
            self.preempt_seqs((seq,))
            valid[idx] = False
    return valid


def _preempt_seqs(stock: Callable[..., Any]) -> Callable[..., Any]:
    def preempt_seqs(self: Any, seqs: Iterable[Any]) -> None:
        runtime = _runtime(self)
        if runtime is not None:
            from lmdeploy.pytorch.messages import MessageStatus

            seqs = list(seqs)
            for seq in seqs:  # a sequence already waiting again is not preempted twice
                if seq.status in (MessageStatus.RUNNING, MessageStatus.READY):
                    runtime.preempted(seq)
        stock(self, seqs)

    return preempt_seqs


# -- steps and finishes ---------------------------------------------------------------


def _activate_seqs(stock: Callable[..., Any]) -> Callable[..., Any]:
    def activate_seqs(self: Any, running: list[Any]) -> None:
        runtime = _runtime(self)
        if runtime is not None:
            runtime.dispatched(running)  # before READY turns RUNNING
        stock(self, running)

    return activate_seqs


def _stop_session(stock: Callable[..., Any]) -> Callable[..., Any]:
    def stop_session(self: Any, session_id: int) -> None:
        runtime = _runtime(self)
        if runtime is not None:
            from lmdeploy.pytorch.messages import MessageStatus

            for seq in self.sessions[session_id].sequences.values():
                if seq.status != MessageStatus.STOPPED:
                    runtime.aborting(seq)
        stock(self, session_id)

    return stop_session


def _end_session(stock: Callable[..., Any]) -> Callable[..., Any]:
    def end_session(self: Any, session_id: int) -> None:
        runtime = _runtime(self)
        if runtime is not None:
            for seq in list(self.sessions[session_id].sequences.values()):
                runtime.finish(seq)
        stock(self, session_id)

    return end_session


# -- prefix cache -------------------------------------------------------------------


def _match_block_prefix(stock: Callable[..., Any]) -> Callable[..., Any]:
    def match_block_prefix(self: Any, seq: Any) -> None:
        runtime = _runtime(self)
        if runtime is None:
            stock(self, seq)
            return
        before = seq.prefix_cache.trie_cursor
        start = before.prefix_len if before is not None else 0
        stock(self, seq)
        node, nodes = seq.prefix_cache.trie_cursor, []
        while node is not None and node.parent is not None and node.prefix_len > start:
            nodes.append(node)
            node = node.parent
        runtime.matched(seq, nodes)

    return match_block_prefix
