"""Output-length predictors: the oracle reads max_tokens, the learned one fits means."""

from __future__ import annotations

import pytest
from schedkit import RequestState

from schedkit_sjf import LearnedPredictor, OraclePredictor, prompt_bucket


def finished(
    prompt: int, output: int, *, tenant: str = "default", max_tokens: int = 4096
) -> RequestState:
    request = RequestState("done", prompt, max_tokens, tenant=tenant)
    request.num_output_tokens = output
    request.num_computed_tokens = prompt + output - 1
    return request


def new(prompt: int, *, tenant: str = "default", max_tokens: int = 4096) -> RequestState:
    return RequestState("new", prompt, max_tokens, tenant=tenant)


@pytest.mark.parametrize(
    ("prompt", "bucket"), [(0, 0), (1, 0), (2, 1), (3, 1), (1023, 9), (1024, 10), (1500, 10)]
)
def test_prompt_bucket_is_the_power_of_two_below(prompt: int, bucket: int) -> None:
    assert prompt_bucket(prompt) == bucket


def test_oracle_predicts_max_tokens_and_learns_nothing() -> None:
    oracle = OraclePredictor()
    oracle.observe(finished(100, 7), "stop")
    assert oracle.predict(new(100, max_tokens=321)) == 321.0


def test_learned_uses_the_prior_until_enough_samples() -> None:
    model = LearnedPredictor(prior=64.0, min_samples=3)
    assert model.predict(new(100)) == 64.0
    model.observe(finished(100, 10), "stop")
    model.observe(finished(100, 20), "length")
    assert model.predict(new(100)) == 64.0
    model.observe(finished(100, 30), "stop")
    assert model.predict(new(100)) == 20.0
    assert model.samples() == 3


def test_learned_keys_by_tenant_and_prompt_bucket_and_backs_off() -> None:
    model = LearnedPredictor(prior=500.0, min_samples=2)
    for _ in range(2):
        model.observe(finished(100, 10, tenant="chat"), "stop")  # bucket 6
        model.observe(finished(3000, 30, tenant="chat"), "stop")  # bucket 11
        model.observe(finished(100, 300, tenant="essay"), "stop")
    assert model.predict(new(120, tenant="chat")) == 10.0  # same tenant and bucket
    assert model.predict(new(2500, tenant="chat")) == 30.0
    assert model.predict(new(20_000, tenant="chat")) == 20.0  # unseen bucket: tenant mean
    assert model.predict(new(100, tenant="essay")) == 300.0
    assert model.predict(new(100, tenant="new")) == pytest.approx(340 / 3)  # global mean


def test_learned_never_predicts_more_than_max_tokens() -> None:
    model = LearnedPredictor(prior=500.0, min_samples=1)
    assert model.predict(new(10, max_tokens=50)) == 50.0
    model.observe(finished(10, 400), "stop")
    assert model.predict(new(10, max_tokens=100)) == 100.0


@pytest.mark.parametrize("reason", ["rejected", "aborted"])
def test_learned_ignores_requests_that_ended_early(reason: str) -> None:
    model = LearnedPredictor(prior=64.0, min_samples=1)
    model.observe(finished(100, 1), reason)
    assert model.samples() == 0
    assert model.predict(new(100)) == 64.0
