"""schedkit-vtc: Virtual Token Counter fair sharing across tenants.

Sheng et al., "Fairness in Serving Large Language Models" (OSDI'24): each tenant has a
counter of the service it received, in weighted tokens (input tokens x ``input_weight``
plus output tokens x ``output_weight``, divided by the tenant's weight); the engine serves
the backlogged tenant with the least counter first. The entry point ``vtc`` in group
``schedkit.policies`` names ``VirtualTokenCounter``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from typing import Annotated, Self

import schedkit
from pydantic import Field, model_validator
from schedkit import EngineView, RequestView, StepReport, hookimpl

from schedkit_vtc.keys import OVERFLOW_TENANT, TENANT_KEY_CHARS, tenant_key
from schedkit_vtc.ledger import Ledger, token_cost

__all__ = [
    "OVERFLOW_TENANT",
    "TENANT_KEY_CHARS",
    "Ledger",
    "VirtualTokenCounter",
    "tenant_key",
    "token_cost",
]

TenantWeight = Annotated[float, Field(gt=0, le=1e6)]


class VirtualTokenCounter(schedkit.Policy):
    """Order the waiting queue by tenant counters, least served first, interleaving.

    ``order_waiting`` repeatedly takes the next request (in the engine's order) of the
    tenant with the least counter, adding that request's prefill cost to a provisional
    copy of the counter, so one step's admissions already alternate between tenants.
    The real counters move in ``on_step_finished``, by the tokens each request computed:
    prompt positions at ``input_weight``, positions past the prompt at ``output_weight``
    (prefix-cache hits are not computed, so not charged). ``admit_request`` only notes
    arrivals, for the counter lift, and always answers ``None``.

    State is bounded (``Ledger``): tenants idle for ``idle_s`` are dropped when that loses
    nothing, at most ``max_tenants`` are kept (the least recently active idle one makes
    room; never one with a request in the engine), and long tenant ids are stored hashed.
    """

    class Options(schedkit.PolicyOptions):
        input_weight: float = Field(
            default=1.0, ge=0, le=1000, description="cost of one prompt token computed"
        )
        output_weight: float = Field(
            default=2.0, ge=0, le=1000, description="cost of one output token computed"
        )
        weights: dict[str, TenantWeight] = Field(
            default_factory=dict,
            description=(
                "share of each tenant (a tenant with weight 2 receives twice the service"
                " of one with weight 1 when both are backlogged); unlisted tenants: 1"
            ),
        )

        idle_s: float = Field(
            default=300.0,
            ge=0,
            le=31_536_000,
            description=(
                "engine seconds after its last request finished that an idle tenant's"
                " counter is dropped, once dropping it changes no decision"
            ),
        )
        max_tenants: int = Field(
            default=10_000,
            ge=1,
            le=10_000_000,
            description=(
                "most tenants tracked; a new one evicts the least recently active idle"
                " tenant, or shares one overflow counter while all have requests in the engine"
            ),
        )

        @model_validator(mode="after")
        def _charges_something(self) -> Self:
            if self.input_weight == 0 and self.output_weight == 0:
                raise ValueError(
                    "input_weight and output_weight are both 0, so no counter would ever"
                    " move; set at least one of them above 0"
                )
            return self

    options: Options

    def __init__(self, options: schedkit.PolicyOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        opts = self.options
        self.ledger = Ledger(opts.weights, idle_s=opts.idle_s, max_tenants=opts.max_tenants)

    @property
    def counters(self) -> dict[str, float]:
        """Service received per tracked tenant key (``tenant_key``: the id itself when
        shorter than ``TENANT_KEY_CHARS``), in weighted tokens over the tenant's weight."""
        return self.ledger.counters

    def _cost(self, request: RequestView, start: int, end: int) -> float:
        opts = self.options
        return token_cost(request, start, end, opts.input_weight, opts.output_weight)

    @hookimpl
    def admit_request(self, request: RequestView) -> None:
        self.ledger.arrive(request)

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        ledger = self.ledger
        ledger.resync(waiting)
        queues: dict[str, deque[tuple[int, RequestView]]] = {}
        for position, request in enumerate(waiting):
            queues.setdefault(ledger.key(request), deque()).append((position, request))
        # (provisional counter, position of the tenant's next request, tenant)
        heap = [(ledger.counter(t), queue[0][0], t) for t, queue in queues.items()]
        heapq.heapify(heap)
        order: list[RequestView] = []
        while heap:
            counter, _, tenant = heapq.heappop(heap)
            queue = queues[tenant]
            request = queue.popleft()[1]
            order.append(request)
            if queue:
                end = request.num_prompt_tokens + request.num_output_tokens
                counter += self._cost(request, request.num_computed_tokens, end) / (
                    ledger.weight(tenant)
                )
                heapq.heappush(heap, (counter, queue[0][0], tenant))
        return order

    @hookimpl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        ledger = self.ledger
        # The views are in their state after the step: the request computed the n
        # positions just below its num_computed_tokens.
        for request, n in zip(report.scheduled, report.num_scheduled_tokens, strict=True):
            end = request.num_computed_tokens
            ledger.charge_request(request, self._cost(request, end - n, end))
            ledger.leave(request)
        for request in report.preempted:
            ledger.requeue(request)
        ledger.step_reported(engine.clock)

    @hookimpl
    def on_request_finished(self, request: RequestView, engine: EngineView) -> None:
        self.ledger.finish(request, engine.clock)
