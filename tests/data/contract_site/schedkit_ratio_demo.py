"""A third-party policy package, as an author would write one (``schedkit contract``'s
tests install it by putting this folder on PYTHONPATH)."""

from __future__ import annotations

from collections.abc import Sequence

from schedkit import Admission, EngineView, Policy, PolicyOptions, RequestView, hookimpl


class HrrnOptions(PolicyOptions):
    max_prompt_tokens: int = 1_000_000  # longer prompts are turned away


class Hrrn(Policy):
    """Highest response ratio next: (wait + prompt) / prompt, with a prompt cap."""

    Options = HrrnOptions

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        assert isinstance(self.options, HrrnOptions)
        if request.num_prompt_tokens > self.options.max_prompt_tokens:
            return Admission.reject("prompt over the cap")
        return None

    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestView], engine: EngineView
    ) -> list[RequestView]:
        def ratio(r: RequestView) -> float:
            service = max(r.num_prompt_tokens, 1)
            return (engine.clock - r.arrival_time + service) / service

        return sorted(waiting, key=ratio, reverse=True)


class KeepPriority(Policy):
    """Preempts the least important running request first (highest priority value, then
    the latest arrival)."""

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        return sorted(running, key=lambda r: (-r.priority, -r.arrival_time))


class LeastProgress(Policy):
    """Preempts the running request with the fewest computed tokens first, never the one
    needing room while another could go: reads ``needing`` and ``num_computed_tokens``."""

    @hookimpl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> list[RequestView]:
        def key(r: RequestView) -> tuple[bool, int]:
            return (r.request_id == needing.request_id, r.num_computed_tokens)

        return sorted(running, key=key)
