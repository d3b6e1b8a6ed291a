"""Output-length predictors: the oracle reads max_tokens, the learned one fits means."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from schedkit import RequestState

from schedkit_sjf import (
    TENANT_KEY_CHARS,
    LearnedPredictor,
    OraclePredictor,
    prompt_bucket,
    tenant_key,
)


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


# --- bounded state ------------------------------------------------------------------


def test_learned_keeps_at_most_max_tenants() -> None:
    model = LearnedPredictor(prior=64.0, min_samples=2)  # max_tenants 10,000
    for i in range(100_000):
        model.observe(finished(100 + i % 3000, 10, tenant=f"tenant-{i}"), "stop")
    assert model.tenants() == 10_000
    assert model.samples() == 100_000  # the global mean still learns from every one


def test_a_flood_of_one_off_tenants_does_not_evict_a_trained_one() -> None:
    model = LearnedPredictor(prior=500.0, min_samples=4, max_tenants=8)
    for _ in range(4):
        model.observe(finished(100, 7, tenant="chat"), "stop")
    for i in range(10_000):
        model.observe(finished(100, 300, tenant=f"one-off-{i}"), "stop")
    assert model.tenants() == 8
    assert model.predict(new(100, tenant="chat")) == 7.0  # still its own mean
    # with every tenant trained, a new one evicts the least recently observed
    full = LearnedPredictor(prior=500.0, min_samples=1, max_tenants=2)
    for tenant, output in (("old", 7), ("recent", 5), ("old", 7), ("new", 9)):
        full.observe(finished(100, output, tenant=tenant), "stop")
    assert full.tenants() == 2
    assert full.predict(new(100, tenant="old")) == 7.0  # seen again after "recent"
    assert full.predict(new(100, tenant="recent")) == 7.0  # evicted: the global mean, 28 / 4
    assert full.predict(new(100, tenant="new")) == 9.0


def test_long_tenant_ids_are_keyed_bounded_and_not_kept() -> None:
    long_a, long_b = "a" * (1 << 20), "a" * (1 << 20 - 1) + "b"
    assert len(tenant_key(long_a)) == len(tenant_key(long_b)) == TENANT_KEY_CHARS
    assert tenant_key(long_a) != tenant_key(long_b)
    assert tenant_key("short") == "short"
    model = LearnedPredictor(prior=64.0, min_samples=1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            tenant = f"{i:03d}" + "x" * (1 << 20)
            request = RequestState(f"r{i}", 100, 4096, tenant=tenant)
            model.predict(request)  # hashes the id once, remembers the key for the request
            request.num_output_tokens = 9
            model.observe(request, "stop")
            del tenant, request
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert model.tenants() == 100 and not model._long_keys
    assert retained < 512 * 1024, f"{retained:,} bytes retained for 100 tenants"
