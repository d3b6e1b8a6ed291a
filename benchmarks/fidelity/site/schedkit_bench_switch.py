"""``bench-switch-sjf``: sjf while an sjf segment's requests wait, the engine's FCFS otherwise.

``benchmarks/fidelity/same_engine.py`` replays one trace several times in one engine,
each copy (a segment) after the previous one has drained, and names every request
``<policy><segment>-<id>``. This policy orders the waiting queue as ``sjf`` does when the
oldest waiting request belongs to an ``sjf`` segment, and gives no opinion (the engine's
FCFS) otherwise, so both arms of an A/B run in the same engine process at the same
speed. The learned predictor observes every finished request, in both kinds of
segment, as one sjf engine serving all of them would.
"""

from __future__ import annotations

from collections.abc import Sequence

from schedkit_sjf import ShortestPredictedJobFirst

from schedkit import EngineView, RequestView, hookimpl

SJF = "sjf"


def segment_policy(request_id: str) -> str:
    """``fcfs`` or ``sjf``: the policy that a request's segment runs under."""
    return SJF if request_id.startswith(SJF) else "fcfs"


class SwitchedSjf(ShortestPredictedJobFirst):
    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView] | None:
        if not waiting:
            return None
        oldest = min(waiting, key=lambda r: r.arrival_time)
        if segment_policy(oldest.request_id) != SJF:
            return None
        return super().order_waiting(waiting, engine)
