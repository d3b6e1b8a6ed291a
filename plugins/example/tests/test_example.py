"""shortest-prompt: installed, discoverable, selectable only by config, correct, conforming."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError
from schedkit import EngineState, PolicyFacade, PolicyRegistry, RequestState, load_config
from schedkit.errors import PolicyConfigError
from schedkit.plugins import implemented_hooks
from schedkit.testing import conformance_test, contract_test

from schedkit_example import ShortestPromptFirst

NAME = "shortest-prompt"


def request(
    request_id: str, prompt: int, *, computed: int = 0, arrival: float = 0.0
) -> RequestState:
    state = RequestState(request_id, prompt, max_tokens=16, arrival_time=arrival)
    state.num_computed_tokens = computed
    return state


def engine_at(clock: float) -> EngineState:
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    engine.clock = clock
    return engine


def ids(requests: list[Any]) -> list[str]:
    return [r.request_id for r in requests]


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-example"
    assert entry.target == "schedkit_example:ShortestPromptFirst"
    assert entry.load() is ShortestPromptFirst


def test_selectable_by_config() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.label == NAME
    assert facade.implemented == {"order_waiting"}
    assert isinstance(facade.policies[0][1], ShortestPromptFirst)


def test_not_active_by_default() -> None:
    assert NAME not in load_config(None).policy
    assert PolicyFacade.from_config(None).label == "fcfs"


# --- behaviour ----------------------------------------------------------------------


def test_orders_by_remaining_prompt_then_arrival() -> None:
    waiting = [
        request("long", 900, arrival=0.0),
        request("half-done", 1000, computed=700, arrival=1.0),  # 300 left
        request("short-late", 50, arrival=3.0),
        request("short-early", 50, arrival=2.0),
    ]
    policy = ShortestPromptFirst()
    order = policy.order_waiting(waiting, engine_at(5.0))
    assert ids(order) == ["short-early", "short-late", "half-done", "long"]
    assert ids(waiting) == ["long", "half-done", "short-late", "short-early"]  # untouched


def test_max_wait_serves_overdue_requests_first_oldest_first() -> None:
    waiting = [
        request("short", 10, arrival=9.0),
        request("long-newer", 5000, arrival=4.0),
        request("long-oldest", 8000, arrival=1.0),
        request("medium", 100, arrival=8.0),
    ]
    policy = ShortestPromptFirst(max_wait_s=5.0)
    order = policy.order_waiting(waiting, engine_at(10.0))
    assert ids(order) == ["long-oldest", "long-newer", "short", "medium"]


def test_through_the_facade_with_options() -> None:
    config = {"policy": NAME, "options": {NAME: {"max_wait_s": 2.0}}}
    facade = PolicyFacade.from_config(config, strict=True)
    waiting = [request("long", 4000, arrival=0.0), request("short", 8, arrival=9.5)]
    order = facade.order_waiting(waiting, engine_at(10.0))
    assert order is not None
    assert ids(order) == ["long", "short"]


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1.0, 3601, "soon"])
def test_bad_option_value_names_the_field(bad: object) -> None:
    with pytest.raises(ValidationError, match="max_wait_s"):
        ShortestPromptFirst.Options.model_validate({"max_wait_s": bad})
    config = {"policy": NAME, "options": {NAME: {"max_wait_s": bad}}}
    with pytest.raises(PolicyConfigError, match=f"{NAME}.*max_wait_s"):
        PolicyFacade.from_config(config)


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="max_wait\n"):
        ShortestPromptFirst.Options.model_validate({"max_wait": 1.0})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_with_max_wait = conformance_test(NAME, {"max_wait_s": 0.5}, max_examples=100)


# --- the CLI ------------------------------------------------------------------------


def test_cli_lists_it_with_its_hooks_and_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    entry = next(e for e in json.loads(result.stdout) if e["name"] == NAME)
    assert entry["distribution"] == "schedkit-example"
    assert entry["hooks"] == implemented_hooks(ShortestPromptFirst) == ["order_waiting"]
    assert "max_wait_s" in entry["options_schema"]["properties"]


# The contract on every engine installed here, as `schedkit contract` runs it: alone, with
# options, and composed with a victim policy.
test_contract = contract_test(NAME)
test_contract_with_max_wait = contract_test(f"{NAME}+lcf", {NAME: {"max_wait_s": 0.05}})
