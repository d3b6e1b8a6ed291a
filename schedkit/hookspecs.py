"""Hook specifications: the scheduling decisions a serving engine makes.

A policy implements any subset of these as methods marked with ``schedkit.hookimpl``.
Engines never call them directly: ``schedkit.facade.PolicyFacade`` does, consulting the
selected policies in configured order (``tryfirst``/``trylast`` marks are ignored:
the configuration decides), isolating faults and validating every decision.
A hook that no selected policy implements is never called.

Decision hooks return ``None`` for "no opinion": the next policy is consulted, then the
engine's default is used. Arguments are read-only views; new arguments are only appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import pluggy

from schedkit.decisions import Admission, BatchBudget, StepReport
from schedkit.views import BlockView, EngineView, ReplicaView, RequestView

Key: TypeAlias = int | float | str | bytes | tuple["Key", ...]
"""What a key hook returns: a number (not NaN), a string, bytes, or a tuple of keys."""

PROJECT = "schedkit"
hookspec = pluggy.HookspecMarker(PROJECT)

# -------------------------------------------------------------------------
# Admission
# -------------------------------------------------------------------------


@hookspec
def on_request_arrived(request: RequestView, engine: EngineView) -> None:
    """Observe a request the engine has just received, before admission decides on it.

    All implementations are called; results are ignored.

    Called exactly once per request the engine receives (also for those that
    ``admit_request`` then rejects), before ``admit_request``, whatever policy answers
    that. A policy that learns from arrivals (e.g. which prefixes queued requests will
    reuse) implements this rather than an ``admit_request`` that answers ``None``, which
    a policy configured before it may pre-empt.

    :param request: the new request; it has computed nothing yet.
    :param engine: the engine's state at arrival (``num_waiting`` excludes ``request``).

    .. versionadded:: 0.3
    """


@hookspec(firstresult=True)
def admit_request(request: RequestView, engine: EngineView) -> Admission | None:
    """Decide whether a newly arrived request enters the waiting queue.

    Stops at first non-None result.

    Called once per request, when the engine receives it and before it is queued.

    :param request: the new request; it has computed nothing yet.
    :param engine: the engine's state at arrival (``num_waiting`` excludes ``request``).

    Return ``Admission.admit()``, ``Admission.reject(reason)`` (the engine finishes the
    request at once and the client sees ``reason``: the simulator counts it by reason; on
    vLLM the request ends with ``finish_reason="abort"`` and ``stop_reason="rejected:
    <reason>"``), or ``None``. The default admits. A rejection must carry a non-empty reason.

    .. versionadded:: 0.1
    """


# -------------------------------------------------------------------------
# Each scheduling step
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def order_waiting(waiting: Sequence[RequestView], engine: EngineView) -> list[RequestView] | None:
    """Order the whole waiting queue; the engine admits from the front.

    Stops at first non-None result.

    Called at most once per scheduling step, at its start (before the running requests
    take their blocks for it), and only when at least one request waits. The simulated
    engine and vLLM call it only while the running batch has a free seat (fewer than
    ``max_num_seqs`` requests), since with none no order could admit anyone; vLLM also
    while a KV connector's loads wait. The simulated engine may also skip calls during a
    run of identical decode steps in which no waiting request could be admitted in any
    order.

    :param waiting: the queue in the engine's current order (preempted requests first,
        then by arrival under FCFS). Never empty. Every waiting request that holds no KV
        blocks is in it, also one whose KV a KV connector will load rather than compute
        (vLLM 0.34 keeps those in a queue of their own, ``async_kv_waiting``; the
        adapter merges it in): the engine starts loads and prefills in the order given.
    :param engine: the engine's state before the step.

    Return a permutation of ``waiting`` (every request exactly once) or ``None`` to keep
    the engine's order.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def plan_batch(engine: EngineView, default: BatchBudget) -> BatchBudget | None:
    """Set the limits of the next scheduling step.

    Stops at first non-None result.

    Called once per scheduling step before any request is scheduled (the simulated
    engine calls it once for a run of identical decode steps).

    :param engine: the engine's state before the step.
    :param default: the engine's configured limits.

    Return a ``BatchBudget`` that may tighten the defaults, never loosen them: every field
    must be at least 1 (``prefill_chunk`` may be 0 for "no cap") and at most the default.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def select_victims(
    running: Sequence[RequestView], needing: RequestView, engine: EngineView
) -> list[RequestView] | None:
    """Choose which running requests to preempt when KV blocks run out.

    Stops at first non-None result.

    Called when ``needing`` cannot get the KV blocks it needs this step. The engine
    preempts the returned requests in order (recompute: their blocks are freed and they
    go back to the front of the waiting queue) until ``needing`` fits; if the list runs
    out first, the engine's default victim order continues.

    :param running: the running requests in the engine's order; includes ``needing``.
    :param needing: the request that needs blocks. Returning it preempts it, which ends
        the search: it is not scheduled this step.
    :param engine: the engine's state at that moment.

    Return distinct members of ``running`` or ``None`` for the default (FCFS: the last
    admitted request first).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def select_evictions(
    candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
) -> list[BlockView] | None:
    """Choose which cached, unreferenced prefix blocks to evict.

    Stops at first non-None result.

    Called when the engine must reuse ``num_blocks`` cached blocks for new data, i.e.
    when no never-cached free block is left. Only blocks no request references are
    candidates, and only the least recently used of them: the engine's *eviction
    window* bounds the cost of a call when thousands of blocks are evictable (the
    simulator offers at most ``max(SimConfig.eviction_window, 4 * num_blocks)``, 4,096
    by default; ``eviction_window=0`` offers all). Blocks outside the window are newer
    than every candidate.

    :param candidates: the evictable cached blocks, least recently used first, at most
        the engine's eviction window.
    :param num_blocks: how many blocks the engine needs now, at least 1 and at most
        ``len(candidates)``.
    :param engine: the engine's state at that moment.

    Return at least ``num_blocks`` distinct candidates in eviction order, or ``None`` for
    the default (least recently used first).

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
        ``candidates`` is bounded by the engine's eviction window (it held every
        evictable block).
    """


# -------------------------------------------------------------------------
# Routing: a cluster of replicas
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def route_request(request: RequestView, replicas: Sequence[ReplicaView]) -> int | None:
    """Choose the replica a newly arrived request goes to.

    Stops at first non-None result.

    Called once per request a cluster receives, before any replica sees it (so before
    that replica's ``on_request_arrived`` and ``admit_request``). Only a cluster calls
    it: the simulator's with ``replicas > 1`` (``schedkit bench --replicas N``), the
    prefill/decode proxy in front of real servers (``schedkit.edge.pd``) and Ray Serve's
    router (``schedkit_ray``: once per routing attempt, over Ray's candidate replicas). A
    single vLLM or SGLang engine has nothing to route (capability matrix).

    A disaggregated deployment (``prefill_replicas``/``decode_replicas``) asks it once
    per pool: when the request arrives, over the prefill instances (every replica's
    ``role`` is ``"prefill"``); when its prefill ends, over the decode instances
    (``"decode"``), which will take its KV. The request is then as that pool's instance
    sees it: on the prefill side with ``max_tokens`` 1, as vLLM's disaggregated proxy
    sends it.

    :param request: the new request, as its replica will see it.
    :param replicas: every replica of the pool, in index order, each with its engine's
        state as of its last finished step and what its prefix cache holds of
        ``request``.

    Return the index of a replica (``0 <= i < len(replicas)``), or ``None`` for the
    cluster's default, round-robin. Anything else counts as a policy error and the
    default routes the request.

    .. versionadded:: 0.3
    """


# -------------------------------------------------------------------------
# Keys: the engine keeps the order
# -------------------------------------------------------------------------
#
# A key hook ranks one request or block, and the engine keeps the order: a request's
# waiting key is asked once each time it joins the waiting queue, so a policy costs one
# call per request instead of a call on the whole list every step. Lower keys go
# first in all three. Keys of every policy implementing the hook combine
# lexicographically in configured order (``slo+vtc``: slo's key, then vtc's to break its
# ties), then the engine's own order breaks the remaining ties. A key is a number (not
# NaN), a string, bytes, or a tuple of those; ``None`` or an invalid key ranks the item
# after every item the policy keyed. A key must not change while its item waits: a
# policy whose order moves over time (aging, fairness counters) implements the list hook.
# Where a policy implements both, the list hook sees the keyed order and may change it.


@hookspec
def waiting_key(request: RequestView, engine: EngineView) -> Key | None:
    """Rank a waiting request: the engine admits lower keys first.

    All results are collected: they combine lexicographically in configured order.

    Called once each time ``request`` joins the waiting queue: when it arrives (after
    admission) and when it is preempted. Ties, and requests no policy keys, keep the
    engine's order (preempted requests first, then by arrival under FCFS).
    ``order_waiting``, when implemented, is then called on the keyed order.

    :param request: the request joining the queue.
    :param engine: the engine's state at that moment.

    Return a key (lower is served first) or ``None``: ranked after every keyed request.

    .. versionadded:: 0.3
    """


@hookspec
def victim_key(request: RequestView, engine: EngineView) -> Key | None:
    """Rank a running request for preemption: the engine preempts lower keys first.

    All results are collected: they combine lexicographically in configured order.

    Called when a request cannot get the KV blocks it needs, once per running request
    considered, before the engine preempts. Ties keep the engine's default victim order
    (FCFS: the last admitted first). ``select_victims``, when implemented and answering,
    takes precedence.

    :param request: a running request (the one needing blocks included).
    :param engine: the engine's state at that moment.

    Return a key (lower is preempted first) or ``None``: preempted after every keyed
    request.

    .. versionadded:: 0.3
    """


@hookspec
def eviction_key(block: BlockView, engine: EngineView) -> Key | None:
    """Rank an evictable cached block: the engine evicts lower keys first.

    All results are collected: they combine lexicographically in configured order.

    Called for blocks while they are unreferenced, so their fields do not change in
    between: the simulator keeps every evictable block in key order (it asks the key of a
    run of blocks freed together, the deepest first, when the run becomes evictable or its
    last block changes, and assumes a block's key is no greater than that of the block
    before it in the prefix), with no eviction window; engines without an order of their
    own ask it once per candidate of their eviction window when they must evict (see the
    capability matrix). Ties keep least recently used first. A policy whose key reads
    only some block fields says so in ``Policy.eviction_key_reads``: engines may then ask
    once for all blocks alike in them.
    ``select_evictions``, when implemented and answering, takes precedence.

    :param block: a cached block no request references.
    :param engine: the engine's state at that moment.

    Return a key (lower is evicted first) or ``None``: evicted after every keyed block.

    .. versionadded:: 0.3
    """


# -------------------------------------------------------------------------
# Observation
# -------------------------------------------------------------------------


@hookspec
def on_step_finished(report: StepReport, engine: EngineView) -> None:
    """Observe a finished scheduling step.

    All implementations are called; results are ignored.

    Called after every engine step, or once for a run of ``report.num_steps`` identical
    decode steps that the simulated engine advanced in one go.

    :param report: what the step(s) computed and preempted.
    :param engine: the engine's state after the step(s).

    .. versionadded:: 0.1
    """


@hookspec
def on_request_finished(request: RequestView, reason: str, engine: EngineView) -> None:
    """Observe a request leaving the engine.

    All implementations are called; results are ignored.

    Called exactly once per request the engine received, rejected ones included.

    :param request: the request in its final state.
    :param reason: ``"stop"``, ``"length"``, ``"rejected"`` or ``"aborted"``.
    :param engine: the engine's state at that moment.

    .. versionadded:: 0.1
    """


DECISION_HOOKS = (
    "admit_request",
    "order_waiting",
    "plan_batch",
    "select_victims",
    "select_evictions",
    "route_request",
)
KEY_HOOKS = ("waiting_key", "victim_key", "eviction_key")
OBSERVATION_HOOKS = ("on_request_arrived", "on_step_finished", "on_request_finished")
HOOK_NAMES = DECISION_HOOKS + KEY_HOOKS + OBSERVATION_HOOKS
