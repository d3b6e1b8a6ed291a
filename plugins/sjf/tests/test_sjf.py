"""sjf: installed, selectable by config only, orders by predicted work with aging, conforms."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from pydantic import ValidationError
from schedkit import (
    EngineState,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    RequestView,
    load_config,
)
from schedkit.errors import PolicyConfigError
from schedkit.plugins import implemented_hooks
from schedkit.testing import conformance_test, contract_test

from schedkit_sjf import LearnedPredictor, OraclePredictor, ShortestPredictedJobFirst

NAME = "sjf"


def request(
    request_id: str,
    prompt: int,
    max_tokens: int = 16,
    *,
    arrival: float = 0.0,
    output: int = 0,
    tenant: str = "default",
) -> RequestState:
    state = RequestState(request_id, prompt, max_tokens, arrival_time=arrival, tenant=tenant)
    state.num_output_tokens = output
    return state


def engine_at(clock: float) -> EngineState:
    engine = EngineState(kv_blocks_total=1024, block_size=16)
    engine.clock = clock
    return engine


def ids(requests: Sequence[RequestView]) -> list[str]:
    return [r.request_id for r in requests]


# --- installation and selection ---------------------------------------------------


def test_discovered_from_its_distribution() -> None:
    entry = PolicyRegistry.discover().entry(NAME)
    assert entry.distribution == "schedkit-sjf"
    assert entry.target == "schedkit_sjf:ShortestPredictedJobFirst"
    assert entry.load() is ShortestPredictedJobFirst


def test_selectable_by_config_not_active_by_default() -> None:
    facade = PolicyFacade.from_config(NAME)
    assert facade.implemented == {"order_waiting", "on_request_finished"}
    assert NAME not in load_config(None).policy
    assert PolicyFacade.from_config(None).label == "fcfs"


def test_predictor_option_selects_the_predictor() -> None:
    assert isinstance(ShortestPredictedJobFirst(predictor="oracle").predictor, OraclePredictor)
    learned = ShortestPredictedJobFirst(prior_output_tokens=7, min_samples=3).predictor
    assert isinstance(learned, LearnedPredictor)
    assert (learned.prior, learned.min_samples, learned.max_tenants) == (7, 3, 10_000)


# --- ordering -----------------------------------------------------------------------


def test_oracle_orders_by_prompt_plus_weighted_output() -> None:
    waiting = [
        request("long-prompt", 900, 10),  # 910
        request("long-output", 100, 1000),  # 1100
        request("short", 50, 10),  # 60
    ]
    policy = ShortestPredictedJobFirst(predictor="oracle", aging_rate=0)
    assert ids(policy.order_waiting(waiting, engine_at(0.0))) == [
        "short",
        "long-prompt",
        "long-output",
    ]
    prompt_only = ShortestPredictedJobFirst(predictor="oracle", aging_rate=0, output_weight=0)
    assert ids(prompt_only.order_waiting(waiting, engine_at(0.0))) == [
        "short",
        "long-output",
        "long-prompt",
    ]
    assert ids(waiting) == ["long-prompt", "long-output", "short"]  # untouched


def test_preempted_request_counts_its_recompute_and_remaining_output() -> None:
    # Preempted by recompute: 40 prompt + 30 output tokens to recompute, 10 outputs left.
    preempted = request("preempted", 40, 40, output=30)
    fresh = request("fresh", 60, 40)  # 60 + 40 = 100
    policy = ShortestPredictedJobFirst(predictor="oracle", aging_rate=0)
    assert policy.score(preempted, 0.0) == 80.0
    assert ids(policy.order_waiting([fresh, preempted], engine_at(0.0))) == ["preempted", "fresh"]


def test_ties_keep_arrival_order() -> None:
    waiting = [request("b", 100, arrival=2.0), request("a", 100, arrival=1.0)]
    policy = ShortestPredictedJobFirst(predictor="oracle", aging_rate=0)
    assert ids(policy.order_waiting(waiting, engine_at(3.0))) == ["a", "b"]


def test_aging_lets_a_long_wait_overtake_shorter_work() -> None:
    long_old = request("long-old", 5000, 1, arrival=0.0)
    short_new = request("short-new", 100, 1, arrival=10.0)
    policy = ShortestPredictedJobFirst(predictor="oracle", aging_rate=100)
    # At t=10: 5001 - 1000 = 4001 against 101: the short one first.
    assert ids(policy.order_waiting([long_old, short_new], engine_at(10.0))) == [
        "short-new",
        "long-old",
    ]
    # At t=60 it has earned 6000 tokens of credit: 5001 - 6000 = -999 against a short
    # request that just arrived (101 - 0), so the long one goes first.
    just_now = request("short-now", 100, 1, arrival=60.0)
    assert ids(policy.order_waiting([just_now, long_old], engine_at(60.0))) == [
        "long-old",
        "short-now",
    ]


def test_learned_predictions_follow_finished_requests() -> None:
    policy = ShortestPredictedJobFirst(prior_output_tokens=100, min_samples=2, aging_rate=0)
    for _ in range(2):
        policy.on_request_finished(request("c", 100, 4096, output=5, tenant="chat"), "stop")
        policy.on_request_finished(request("e", 100, 4096, output=900, tenant="essay"), "stop")
    waiting = [
        request("essay", 100, 4096, tenant="essay"),
        request("chat", 120, 4096, tenant="chat"),
    ]
    assert ids(policy.order_waiting(waiting, engine_at(0.0))) == ["chat", "essay"]


def test_through_the_facade_with_options() -> None:
    config = {"policy": NAME, "options": {NAME: {"predictor": "oracle", "aging_rate": 0}}}
    facade = PolicyFacade.from_config(config, strict=True)
    waiting = [request("long", 4000, arrival=0.0), request("short", 8, arrival=9.5)]
    order = facade.order_waiting(waiting, engine_at(10.0))
    assert order is not None
    assert ids(order) == ["short", "long"]


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("predictor", "magic"),
        ("output_weight", -1.0),
        ("aging_rate", -0.5),
        ("aging_rate", 1e9),
        ("prior_output_tokens", 0),
        ("min_samples", 0),
        ("max_tenants", 0),
    ],
)
def test_bad_option_value_names_the_field(field: str, bad: object) -> None:
    with pytest.raises(ValidationError, match=field):
        ShortestPredictedJobFirst.Options.model_validate({field: bad})
    config = {"policy": NAME, "options": {NAME: {field: bad}}}
    with pytest.raises(PolicyConfigError, match=f"{NAME}.*{field}"):
        PolicyFacade.from_config(config)


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="aging\n"):
        ShortestPredictedJobFirst.Options.model_validate({"aging": 1.0})


# --- the conformance kit ------------------------------------------------------------

test_conformance = conformance_test(NAME, max_examples=100)
test_conformance_oracle = conformance_test(NAME, {"predictor": "oracle"}, max_examples=50)
test_conformance_learned_fast = conformance_test(
    NAME, {"min_samples": 1, "aging_rate": 0, "output_weight": 3.5}, max_examples=50
)
test_conformance_few_tenants = conformance_test(
    NAME, {"min_samples": 1, "max_tenants": 1}, max_examples=50
)


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
    assert entry["distribution"] == "schedkit-sjf"
    assert entry["hooks"] == implemented_hooks(ShortestPredictedJobFirst)
    assert set(entry["options_schema"]["properties"]) == {
        "predictor",
        "output_weight",
        "aging_rate",
        "prior_output_tokens",
        "min_samples",
        "max_tenants",
    }


test_contract = contract_test(NAME)  # on every engine installed here
test_contract_oracle = contract_test(NAME, {NAME: {"predictor": "oracle"}})
