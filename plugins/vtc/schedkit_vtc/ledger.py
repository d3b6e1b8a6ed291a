"""Per-tenant virtual token counters and who is backlogged: the state VTC decides from.

The state is bounded: one entry per tenant *key* (``schedkit_vtc.keys``: at most
``TENANT_KEY_CHARS`` characters whatever the id), at most ``max_tenants`` of them plus the
shared overflow key, and per-request state only for requests in the engine.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from schedkit import RequestView

from schedkit_vtc.keys import OVERFLOW_TENANT, tenant_key

__all__ = ["Ledger", "token_cost"]


def token_cost(
    request: RequestView, start: int, end: int, input_weight: float, output_weight: float
) -> float:
    """Weighted cost of computing the request's token positions ``start..end-1``.

    Positions inside the prompt are input tokens; positions past it are output tokens,
    also when a preempted request recomputes them as part of a prefill.
    """
    start = max(start, 0)
    if end <= start:
        return 0.0
    num_input = max(0, min(end, request.num_prompt_tokens) - start)
    return input_weight * num_input + output_weight * (end - start - num_input)


class Ledger:
    """Service counters per tenant (weighted tokens over the tenant's weight) and the
    request ids each tenant has waiting.

    A tenant is *backlogged* while it has a request waiting. When a tenant becomes
    backlogged again, its counter is lifted to the least counter among the other
    backlogged tenants, so service it did not ask for while idle is not banked. When no
    other tenant is backlogged, the floor is the counter of the tenant whose backlog
    emptied last, so a queue that drains for a moment does not reset fairness.

    **Bounds.** Each request is bound to a tenant key when first seen and keeps it until
    it finishes. A tenant is *active* while it has a request in the engine (waiting or
    running) and *idle* from the moment its last one finished.

    - *Expiry.* A tenant idle for ``idle_s`` (engine clock) is dropped once its counter
      is at most ``floor_bound()``, the least counter of the active tenants and of the
      tenant whose backlog emptied last. Every later lift is to at least that bound, so
      when the tenant returns ``max(counter, lift) == lift``: dropping it (a returning
      unknown tenant starts at 0 and is lifted) changes no counter and no decision. A
      tenant whose counter is above the bound (it was served past the others before it
      went idle) keeps its entry until the bound reaches it. The tenant whose backlog
      emptied last is never dropped: its counter is the floor when nothing waits.
    - *Cap.* A new tenant that finds ``max_tenants`` entries evicts the least recently
      active idle tenant. If that tenant's counter was above the bound, the excess is
      forgiven: it returns as a new id would, which any client can do at will (fresh
      tenant ids are VTC's known weakness), so eviction gives a client nothing it could
      not take, and it never touches a tenant with a request in the engine. With every
      entry active, the newcomer's requests share the ``OVERFLOW_TENANT`` key, one
      tenant's share between all of them.

    The lossless expiry assumes the ledger sees each request waiting (``arrive`` or
    ``resync``) before it runs, as the hooks guarantee.
    """

    def __init__(
        self,
        weights: Mapping[str, float],
        *,
        idle_s: float = math.inf,
        max_tenants: int = 10_000,
    ) -> None:
        self.weights = {tenant_key(t): w for t, w in weights.items()}
        self.idle_s = idle_s
        self.max_tenants = max_tenants
        self.counters: dict[str, float] = {}  # every tracked key: the entries
        self.waiting: dict[str, set[str]] = {}  # backlogged key -> ids waiting (non-empty)
        self.last_left: str | None = None
        self._key_of: dict[str, str] = {}  # request id -> key, requests in the engine
        # request id -> key, finished since the last step report (which may still charge
        # them: the simulator reports a step after the requests that finished in it)
        self._finished: dict[str, str] = {}
        self._live: dict[str, int] = {}  # key -> its requests in the engine (> 0)
        self._idle: OrderedDict[str, float] = OrderedDict()  # key -> went idle at
        # idle past idle_s with a counter above the bound: key -> sequence number; with a
        # min-heap on the counter (stale entries skipped by their sequence number)
        self._ripe: OrderedDict[str, int] = OrderedDict()
        self._ripe_heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._peak = 0  # most entries since the tables were last rebuilt

    # -- counters ---------------------------------------------------------------------

    def counter(self, tenant: str) -> float:
        """Counter of a tenant key (a short tenant id is its own key)."""
        return self.counters.get(tenant, 0.0)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def charge(self, tenant: str, cost: float) -> None:
        """Add ``cost`` weighted tokens of service, scaled by the tenant's weight."""
        if cost:
            self.counters[tenant] = self.counter(tenant) + cost / self.weight(tenant)

    def backlogged(self) -> list[str]:
        return list(self.waiting)

    def lift(self, tenant: str, others: Iterable[str]) -> None:
        """Raise ``tenant``'s counter to the least counter of ``others`` (see the class)."""
        floors = [self.counter(t) for t in others if t != tenant]
        if floors:
            floor = min(floors)
        elif self.last_left is not None and self.last_left != tenant:
            floor = self.counter(self.last_left)
        else:
            return
        if self.counter(tenant) < floor:
            self.counters[tenant] = floor

    # -- requests ---------------------------------------------------------------------

    def key(self, request: RequestView) -> str:
        """The key ``request`` is bound to; binds it (making its tenant active) if new."""
        request_id = request.request_id
        key = self._key_of.get(request_id)
        if key is not None:
            return key
        key = self._entry(tenant_key(request.tenant))
        self._key_of[request_id] = key
        live = self._live.get(key, 0)
        if not live:
            self._idle.pop(key, None)
            self._ripe.pop(key, None)
        self._live[key] = live + 1
        return key

    def arrive(self, request: RequestView) -> None:
        """A new request waits: lift its tenant if it was not backlogged."""
        key = self.key(request)
        ids = self.waiting.get(key)
        if ids is None:
            self.lift(key, self.waiting)
            self.waiting[key] = {request.request_id}
        else:
            ids.add(request.request_id)

    def requeue(self, request: RequestView) -> None:
        """A preempted request waits again; no lift: its tenant was being served."""
        self.waiting.setdefault(self.key(request), set()).add(request.request_id)

    def leave(self, request: RequestView) -> None:
        """The request stopped waiting: it was scheduled, or it finished."""
        request_id = request.request_id
        key = self._key_of.get(request_id)
        if key is None:
            return
        ids = self.waiting.get(key)
        if ids and request_id in ids:
            ids.discard(request_id)
            if not ids:
                del self.waiting[key]
                self._set_last_left(key)

    def charge_request(self, request: RequestView, cost: float) -> None:
        """Charge ``cost`` to the key ``request`` is bound to (binding it if new), or was
        bound to if it finished since the last step report."""
        key = self._finished.get(request.request_id)
        if key is None:
            self.charge(self.key(request), cost)
        elif key in self.counters:  # else evicted since: nothing to charge
            self.charge(key, cost)

    def step_reported(self, clock: float) -> None:
        """A step report was handled: expire idle tenants, forget finished requests."""
        self._finished.clear()
        self.expire(clock)

    def finish(self, request: RequestView, clock: float) -> None:
        """The request left the engine; its tenant goes idle with its last request."""
        self.leave(request)
        key = self._key_of.pop(request.request_id, None)
        if key is None:
            return
        self._finished[request.request_id] = key
        live = self._live[key] - 1
        if live:
            self._live[key] = live
        else:
            del self._live[key]
            self._idle[key] = clock

    def resync(self, waiting: Iterable[RequestView]) -> None:
        """Make the waiting sets match the engine's queue.

        A tenant found waiting that was not backlogged here (its arrival reached another
        policy's ``admit_request`` first) is lifted as on arrival, against the tenants
        that stayed backlogged; tenants that stopped waiting unnoticed leave.
        """
        now: dict[str, set[str]] = {}
        for request in waiting:
            now.setdefault(self.key(request), set()).add(request.request_id)
        before = set(self.waiting)
        stayed = [tenant for tenant in now if tenant in before]
        for tenant in now:  # queue order: deterministic
            if tenant not in before:
                self.lift(tenant, stayed)
        gone = [tenant for tenant in self.waiting if tenant in before and tenant not in now]
        if gone:
            self._set_last_left(gone[-1])
        self.waiting = now

    # -- bounds -----------------------------------------------------------------------

    def floor_bound(self) -> float:
        """A lower bound on every lift from now on: the least counter of the active
        tenants and of the tenant whose backlog emptied last; 0 before any emptied.

        Lifts are to the least backlogged counter (backlogged tenants are active) or to
        the last-left tenant's; a tenant becoming active is lifted to one of those, and
        counters only grow, so the bound holds for every later lift.
        """
        if self.last_left is None:
            return 0.0
        counters = self.counters
        active = min((counters[k] for k in self._live), default=math.inf)
        return min(counters[self.last_left], active)

    def expire(self, clock: float) -> None:
        """Drop the tenants idle for ``idle_s`` whose counter is at most ``floor_bound()``."""
        idle, ripe, heap = self._idle, self._ripe, self._ripe_heap
        cutoff = clock - self.idle_s
        while idle:
            key, since = next(iter(idle.items()))
            if since > cutoff:
                break
            del idle[key]
            self._seq += 1
            ripe[key] = self._seq
            if key != self.last_left:
                heapq.heappush(heap, (self.counters[key], self._seq, key))
        if len(heap) > 2 * len(ripe) + 64:  # stale entries of tenants that came back
            heap = [(self.counters[k], s, k) for k, s in ripe.items() if k != self.last_left]
            heapq.heapify(heap)
            self._ripe_heap = heap
        if not heap or self.last_left is None or heap[0][0] > self.counter(self.last_left):
            return  # the bound is at most the last-left counter: skip computing it
        bound = self.floor_bound()
        while heap and heap[0][0] <= bound:
            _, seq, key = heapq.heappop(heap)
            if ripe.get(key) == seq and key != self.last_left:
                self._drop(key)
        if 4 * len(self.counters) < self._peak:
            # Python's dicts keep their size after deletions: hand back the memory of a
            # crowd of tenants that has gone.
            self.counters = dict(self.counters)
            self._idle = OrderedDict(self._idle)
            self._ripe = OrderedDict(self._ripe)
            self._peak = len(self.counters)

    def _entry(self, key: str) -> str:
        """``key`` if tracked or if there is room (evicting one idle tenant if need be),
        else the overflow key."""
        counters = self.counters
        if key in counters:
            return key
        tracked = len(counters) - (OVERFLOW_TENANT in counters)
        if tracked >= self.max_tenants and not self._evict_one():
            key = OVERFLOW_TENANT
            if key in counters:
                return key
        counters[key] = 0.0
        self._peak = max(self._peak, len(counters))
        return key

    def _evict_one(self) -> bool:
        """Drop the least recently active idle tenant; False if there is none."""
        for queue in (self._ripe, self._idle):  # every ripe key went idle before the rest
            for key in queue:
                if key != self.last_left and key != OVERFLOW_TENANT:
                    self._drop(key)
                    return True
        return False

    def _drop(self, key: str) -> None:
        del self.counters[key]
        self.waiting.pop(key, None)
        self._idle.pop(key, None)
        self._ripe.pop(key, None)

    def _set_last_left(self, key: str) -> None:
        previous = self.last_left
        self.last_left = key
        if previous is not None and previous != key:
            seq = self._ripe.get(previous)
            if seq is not None:  # it was kept out of the heap while it was the floor
                heapq.heappush(self._ripe_heap, (self.counters[previous], seq, previous))
