"""The faulty policy of the SGLang chaos test (``tests/test_chaos.py``).

``CountingFlaky`` is the contract suite's ``Flaky`` (on ``fault_rate`` of every decision
hook's calls it raises, on as many it answers nonsense the facade must refuse) that also
tallies what happened, for the test to read once the engine is gone: it runs in SGLang's
scheduler process, so it appends one line per event to the file ``tally`` names:

- ``<hook> raise|nonsense|none``: one decision call and what ``Flaky`` did on it;
- ``evict <num_blocks> <candidates>``: SGLang started a radix-cache eviction with
  evictable leaves (``select_evictions`` is asked only then) and must free ``num_blocks``;
- ``finished <rid> <reason> <cached tokens> <retractions>``: a request left the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from schedkit import Admission, BatchBudget, BlockView, RequestView, hookimpl
from schedkit.testing.contract import Flaky


class CountingFlaky(Flaky):
    """``Flaky``, tallying its answers, SGLang's evictions and how requests ended."""

    class Options(Flaky.Options):
        tally: str = ""  # file to append the events to

    _out: IO[str] | None = None
    _hook = ""

    def _tally(self, line: str) -> None:
        path: str = self.options.tally  # type: ignore[attr-defined]
        if not path:
            return
        if self._out is None:
            self._out = open(path, "a", buffering=1)  # noqa: SIM115 - lives with the policy
        self._out.write(line + "\n")

    def _answer(self, nonsense: Any) -> Any:
        try:
            answer = super()._answer(nonsense)
        except RuntimeError:
            self._tally(f"{self._hook} raise")
            raise
        self._tally(f"{self._hook} {'none' if answer is None else 'nonsense'}")
        return answer

    @hookimpl
    def admit_request(self) -> Admission | None:
        self._hook = "admit_request"
        return super().admit_request()

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView]) -> list[RequestView] | None:
        self._hook = "order_waiting"
        return super().order_waiting(waiting)

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget | None:
        self._hook = "plan_batch"
        return super().plan_batch(default)

    @hookimpl
    def select_victims(self, running: Sequence[RequestView]) -> list[RequestView] | None:
        self._hook = "select_victims"
        return super().select_victims(running)

    @hookimpl
    def select_evictions(  # type: ignore[override]  # pluggy passes hook arguments by name
        self, candidates: Sequence[BlockView], num_blocks: int
    ) -> list[BlockView] | None:
        self._hook = "select_evictions"
        self._tally(f"evict {num_blocks} {len(candidates)}")
        return super().select_evictions(candidates)

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        self._tally(
            f"finished {request.request_id} {reason} {request.num_cached_tokens}"
            f" {request.num_preemptions}"
        )
