"""Per-tenant virtual token counters and who is backlogged: the state VTC decides from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from schedkit import RequestView

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
    """

    def __init__(self, weights: Mapping[str, float]) -> None:
        self.weights = weights
        self.counters: dict[str, float] = {}
        self.waiting: dict[str, set[str]] = {}
        self.last_left: str | None = None

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def charge(self, tenant: str, cost: float) -> None:
        """Add ``cost`` weighted tokens of service, scaled by the tenant's weight."""
        if cost:
            self.counters[tenant] = self.counter(tenant) + cost / self.weight(tenant)

    def backlogged(self) -> list[str]:
        return [tenant for tenant, ids in self.waiting.items() if ids]

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

    def arrive(self, request: RequestView) -> None:
        """A new request waits: lift its tenant if it was not backlogged."""
        ids = self.waiting.setdefault(request.tenant, set())
        if not ids:
            self.lift(request.tenant, self.backlogged())
        ids.add(request.request_id)

    def requeue(self, request: RequestView) -> None:
        """A preempted request waits again; no lift: its tenant was being served."""
        self.waiting.setdefault(request.tenant, set()).add(request.request_id)

    def leave(self, request: RequestView) -> None:
        """The request stopped waiting: it was scheduled, or it finished."""
        ids = self.waiting.get(request.tenant)
        if ids and request.request_id in ids:
            ids.discard(request.request_id)
            if not ids:
                self.last_left = request.tenant

    def resync(self, waiting: Iterable[RequestView]) -> None:
        """Make the waiting sets match the engine's queue.

        A tenant found waiting that was not backlogged here (its arrival reached another
        policy's ``admit_request`` first) is lifted as on arrival, against the tenants
        that stayed backlogged; tenants that stopped waiting unnoticed leave.
        """
        now: dict[str, set[str]] = {}
        for request in waiting:
            now.setdefault(request.tenant, set()).add(request.request_id)
        before = {tenant for tenant, ids in self.waiting.items() if ids}
        stayed = [tenant for tenant in now if tenant in before]
        for tenant in now:  # queue order: deterministic
            if tenant not in before:
                self.lift(tenant, stayed)
        gone = [tenant for tenant in self.waiting if tenant in before and tenant not in now]
        if gone:
            self.last_left = gone[-1]
        self.waiting = now
