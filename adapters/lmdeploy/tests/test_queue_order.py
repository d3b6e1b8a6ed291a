"""``order_waiting`` is shown the engine's current order on LMDeploy as on the simulator:
the order the policy last returned, then the requests that joined since (docs/hooks.md).
LMDeploy sorts its queue by arrival; shown that, a policy whose sort ties (equal keys:
shortest-prompt's overdue requests, all arrived at once) kept LMDeploy's order instead of
its own, and admitted o0 before o2 where the simulator and vLLM admit o2 first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from schedkit import EngineView, Policy, RequestView, hookimpl
from schedkit.testing.contract import SCENARIOS, check_outcome, run_sim

from schedkit_lmdeploy.harness.contract import run_lmdeploy


class Reversing(Policy):
    """Reverses whatever it is shown, and records what it was shown and returned."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[str], list[str]]] = []

    @hookimpl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> list[Any]:
        answer = list(reversed(waiting))
        self.calls.append(([r.request_id for r in waiting], [r.request_id for r in answer]))
        return answer


@pytest.mark.parametrize("run", [run_sim, run_lmdeploy], ids=["sim", "lmdeploy"])
def test_the_policy_is_shown_the_order_it_last_returned(run: Any) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "arrival-order")
    policy = Reversing()
    check_outcome(scenario, run(scenario, [("reversing", policy)]))
    assert len(policy.calls) >= 3
    for (_, answer), (shown, _) in zip(policy.calls, policy.calls[1:], strict=False):
        still = [rid for rid in answer if rid in shown]  # those not admitted meanwhile
        assert shown[: len(still)] == still, (answer, shown)
