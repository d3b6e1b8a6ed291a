"""The router's policy: a ``PolicyFacade`` that also says why a decision had no answer.

``route`` gives the replica's index, or None and the reason Ray's default choice takes
over: ``"raised"`` (the policy raised), ``"invalid"`` (it answered something other than
a candidate's index), ``"timeout"`` (it ran past the hard budget, or was skipped while
an abandoned call ran on) or ``"none"`` (no policy had an opinion). The facade counts
and logs the faults as in every engine (``errors``, ``abandoned_calls``...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from schedkit.config import SchedkitConfig, load_config
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.policy_thread import HookBusy, HookTimeout
from schedkit.views import ReplicaView, RequestView

__all__ = ["FALLBACK_REASONS", "RouteFacade", "router_config"]

FALLBACK_REASONS = ("raised", "invalid", "timeout", "none")


def router_config(
    policy: str | Mapping[str, Any] | None, options: str | Mapping[str, Any] | None
) -> SchedkitConfig | None:
    """``policy`` (a name, a composition, a config file or a config as a dict) with
    ``options`` (JSON or a dict, ``{"policy-name": {...}}``) over its own options, as
    ``schedkit serve --policy P --options JSON`` reads them; None without a policy."""
    if policy is None:
        if options:
            raise SchedkitError("options without a policy: name the policy they are for")
        return None
    config = load_config(dict(policy) if isinstance(policy, Mapping) else policy)
    if options is None:
        return config
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError as exc:
            raise SchedkitError(f"options are not valid JSON: {exc}") from exc
    if not isinstance(options, Mapping):
        raise SchedkitError('options must be a JSON object like {"policy-name": {...}}')
    merged = config.model_dump()
    merged["options"] = {**config.options, **options}
    return load_config(merged)


class RouteFacade(PolicyFacade):
    """The configured policies behind ``route``, with each fault's kind kept."""

    _reason = "invalid"
    _last_fault: str | None = None

    @classmethod
    def for_router(cls, config: SchedkitConfig, budget_ms: float) -> RouteFacade:
        """The facade of ``config`` with a hard budget of ``budget_ms`` per decision
        (a policy past it is abandoned and Ray's default routes the request)."""
        facade = cls.from_config(config, hook_budget_ms=budget_ms, hook_budget_hard=True)
        assert isinstance(facade, RouteFacade)
        return facade

    def _raised(self, policy: str, hook: str, exc: BaseException) -> None:
        self._reason = "timeout" if type(exc) in (HookTimeout, HookBusy) else "raised"
        try:
            super()._raised(policy, hook, exc)
        finally:
            self._reason = "invalid"

    def _fault(
        self, policy: str, hook: str, problem: str, cause: BaseException | None = None
    ) -> None:
        self._last_fault = self._reason
        super()._fault(policy, hook, problem, cause)

    def decide(
        self, request: RequestView, replicas: Sequence[ReplicaView]
    ) -> tuple[int | None, str]:
        """The chosen index and ``"policy"``, or None and why there is none (a
        composition's later policy may answer after an earlier one's fault: that counts
        as the policy's choice)."""
        self._last_fault = None
        chosen = self.route(request, replicas)
        if chosen is not None:
            return chosen, "policy"
        return None, self._last_fault or "none"
