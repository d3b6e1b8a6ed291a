"""Metrics of one arm, the statistics under them, and paired comparisons between arms."""

from __future__ import annotations

import json
import random
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedkit.bench.stats.estimators import (
    jain,
    percentile,
    summary,
    weighted_percentile,
    weighted_summary,
)
from schedkit.bench.stats.metrics import (
    compute_metrics,
    per_request_samples,
    service_jain,
)
from schedkit.records import RequestRecord, RunResult


def rec(
    rid: str = "r",
    *,
    arrival: float = 0.0,
    scheduled: float | None = None,
    ttft: float | None = 0.1,
    duration: float = 1.0,
    tokens: int = 11,
    reason: str = "length",
    tenant: str = "default",
    priority: int = 0,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
) -> RequestRecord:
    """A request arriving at ``arrival`` whose first token comes ``ttft`` s later and
    whose last comes ``duration`` s after arrival (times in seconds)."""
    done = reason in ("length", "stop")
    return RequestRecord(
        request_id=rid,
        tenant=tenant,
        priority=priority,
        arrival_s=arrival,
        prompt_tokens=16,
        max_tokens=tokens,
        slo_ttft_ms=slo_ttft_ms,
        slo_tpot_ms=slo_tpot_ms,
        output_tokens=tokens if done else 0,
        finish_reason=reason,
        reject_reason="queue_full" if reason == "rejected" else "",
        scheduled_s=(arrival if scheduled is None else scheduled) if done else None,
        first_token_s=arrival + ttft if done and ttft is not None else None,
        finish_s=arrival + duration if done else None,
    )


def run_of(records: list[RequestRecord], **kwargs: Any) -> RunResult:
    kwargs.setdefault("duration_s", 10.0)
    return RunResult(policy=kwargs.pop("policy", "fcfs"), records=records, **kwargs)


def metrics(run: RunResult, ttft: float | None = None, tpot: float | None = None) -> dict[str, Any]:
    return compute_metrics(run, slo_ttft_ms=ttft, slo_tpot_ms=tpot)


# ---------------------------------------------------------------------------
# latency definitions
# ---------------------------------------------------------------------------


def test_latency_definitions_in_ms() -> None:
    r = rec(arrival=1.0, scheduled=1.5, ttft=1.0, duration=3.0, tokens=5)
    m = metrics(run_of([r]))
    assert m["ttft_ms"] == {"mean": 1000.0, "p50": 1000.0, "p90": 1000.0, "p99": 1000.0}
    assert m["tpot_ms"]["p50"] == pytest.approx(500.0)  # 2 s over the 4 tokens after the first
    assert m["e2e_ms"]["p50"] == pytest.approx(3000.0)
    assert m["queue_ms"]["p50"] == pytest.approx(500.0)


def test_single_token_request_has_no_tpot() -> None:
    m = metrics(run_of([rec(tokens=1)]))
    assert m["tpot_ms"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert m["ttft_ms"]["p50"] == pytest.approx(100.0)


def test_only_completed_requests_give_samples_and_count() -> None:
    records = [
        rec("a", ttft=0.2, tokens=10),
        rec("b", ttft=0.4, reason="stop", tokens=4),
        rec("c", reason="rejected"),
        rec("d", reason=""),  # unfinished
        rec("e", reason="aborted"),
    ]
    m = metrics(run_of(records, duration_s=2.0))
    assert (m["requests"], m["completed"], m["rejected"], m["unfinished"]) == (5, 2, 1, 1)
    assert m["rejections"] == {"queue_full": 1}  # derived from records when the run has none
    assert m["ttft_ms"]["mean"] == pytest.approx(300.0)
    assert m["output_tokens"] == 14
    assert m["throughput_tok_s"] == pytest.approx(7.0)
    json.dumps(m)  # JSON-serialisable


def test_run_counters_are_passed_through() -> None:
    run = run_of(
        [rec()],
        steps=7,
        preemptions=3,
        recomputed_tokens=40,
        prefix_query_tokens=200,
        prefix_hit_tokens=50,
        policy_errors=2,
        policy_errors_by_hook={"order_waiting": 2},
        rejections={"too_long": 4},
        kv_usage_mean=0.25,
        wall_s=1.5,
    )
    m = metrics(run)
    assert m["prefix_hit_rate"] == 0.25
    assert m["rejections"] == {"too_long": 4}
    assert m["policy_errors_by_hook"] == {"order_waiting": 2}
    for key, value in [("steps", 7), ("preemptions", 3), ("recomputed_tokens", 40)]:
        assert m[key] == value
    assert (m["kv_usage_mean"], m["wall_s"], m["duration_s"]) == (0.25, 1.5, 10.0)
    assert metrics(run_of([rec()]))["prefix_hit_rate"] == 0.0


def test_rejection_reasons_differing_only_in_numbers_are_grouped() -> None:
    rejections = {
        "predicted TTFT 1200 ms exceeds SLO 1000 ms": 2,
        "predicted TTFT 1530.5 ms exceeds SLO 1000 ms": 1,
        "tenant blocked": 3,
    }
    m = metrics(run_of([rec()], rejections=rejections))
    assert m["rejections"] == {"predicted TTFT N ms exceeds SLO N ms": 3, "tenant blocked": 3}


def test_itl_uses_weighted_mean_and_percentiles() -> None:
    m = metrics(run_of([rec()], itl=[(0.01, 90), (0.1, 10)]))
    # 100 token gaps: 90 of 10 ms and 10 of 100 ms.
    assert m["itl_ms"]["mean"] == pytest.approx(19.0)
    assert m["itl_ms"]["p50"] == pytest.approx(10.0)
    assert m["itl_ms"]["p90"] == pytest.approx(19.0)  # rank 89.1: 10 ms + 0.1 * 90 ms
    assert m["itl_ms"]["p99"] == pytest.approx(100.0)


# ---------------------------------------------------------------------------
# SLO attainment
# ---------------------------------------------------------------------------


def test_request_targets_override_global_ones() -> None:
    records = [
        rec("meets", ttft=0.8),
        rec("own_looser_target", ttft=1.5, slo_ttft_ms=2000),
        rec("own_tighter_target", ttft=0.5, slo_ttft_ms=400),
        rec("too_slow", ttft=1.2),
        rec("rejected", reason="rejected"),
    ]
    m = metrics(run_of(records), ttft=1000)
    assert m["slo_attainment"] == pytest.approx(2 / 5)
    assert per_request_samples(run_of(records), slo_ttft_ms=1000)["met_slo"] == [1, 1, 0, 0, 0]


def test_missing_target_is_not_checked_and_one_token_passes_tpot() -> None:
    slow_decode = rec("slow_decode", ttft=0.1, duration=10.0, tokens=11)  # TPOT 990 ms
    one_token = rec("one_token", ttft=0.1, tokens=1)
    assert metrics(run_of([slow_decode]), ttft=500)["slo_attainment"] == 1.0
    assert metrics(run_of([slow_decode]), tpot=100)["slo_attainment"] == 0.0
    assert metrics(run_of([one_token]), tpot=1)["slo_attainment"] == 1.0


def test_attainment_is_null_only_when_no_target_applies() -> None:
    assert metrics(run_of([rec(), rec()]))["slo_attainment"] is None
    assert per_request_samples(run_of([rec()]))["met_slo"] == [None]
    # One request's own target makes attainment defined; the other passes unchecked.
    records = [rec("a", ttft=0.3, slo_ttft_ms=200), rec("b"), rec("c", reason="")]
    assert metrics(run_of(records))["slo_attainment"] == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------
# tenants and priorities
# ---------------------------------------------------------------------------


def test_single_tenant_has_no_breakdown() -> None:
    m = metrics(run_of([rec("a"), rec("b")]))
    assert "tenants" not in m and "jain_fairness" not in m and "priorities" not in m
    assert "jain_ttft" not in m


def test_jain_over_tenant_mean_ttft() -> None:
    equal = [rec("a", tenant="x", ttft=0.2), rec("b", tenant="y", ttft=0.2)]
    assert metrics(run_of(equal))["jain_ttft"] == pytest.approx(1.0)
    unequal = [
        rec("a", tenant="x", ttft=0.1),
        rec("b", tenant="y", ttft=0.2),
        rec("c", tenant="y", ttft=0.4),
    ]
    m = metrics(run_of(unequal), ttft=250)
    # Means 100 and 300 ms: 400^2 / (2 * (100^2 + 300^2)) = 0.8
    assert m["jain_ttft"] == pytest.approx(0.8)
    x, y = m["tenants"]["x"], m["tenants"]["y"]
    assert (y["requests"], y["completed"], y["rejected"], y["output_tokens"]) == (2, 2, 0, 22)
    assert x["slo_attainment"] == 1.0 and y["slo_attainment"] == 0.5
    assert y["ttft_ms"]["mean"] == pytest.approx(300.0)


def served(
    tenant: str,
    arrival: float,
    scheduled: float | None,
    first: float | None,
    finish: float | None,
    *,
    prompt: int = 10,
    tokens: int = 1,
    reason: str = "length",
) -> RequestRecord:
    """A request of ``tenant`` with explicit times (s), prompt and output tokens. It waits
    in the queue (its tenant is backlogged) from ``arrival`` to ``scheduled``."""
    return RequestRecord(
        request_id=f"{tenant}{arrival}{scheduled}{first}",
        tenant=tenant,
        priority=0,
        arrival_s=arrival,
        prompt_tokens=prompt,
        max_tokens=max(tokens, 1),
        output_tokens=tokens,
        finish_reason=reason,
        scheduled_s=scheduled,
        first_token_s=first,
        finish_s=finish,
    )


def test_service_jain_is_one_when_tenants_are_served_equally() -> None:
    # Both wait on [0, 1) and get 10 prompt + 1 first token x 2 = 12 at t=1.
    both = [served("x", 0, 1, 1, 3, tokens=3), served("y", 0, 1, 1, 3, tokens=3)]
    assert service_jain(both, 10.0) == pytest.approx(1.0)
    assert metrics(run_of(both))["jain_fairness"] == pytest.approx(1.0)


def test_service_jain_drops_when_one_tenant_is_served_while_the_other_waits() -> None:
    # FCFS-like: x's first request runs at once (12 at t=1) while x's second waits on
    # [0, 1) and y's only request waits on [0, 2). Both wait on [0, 1): x's rate 12, y's 0.
    serial = [served("x", 0, 0, 1, 2), served("x", 0, 1, 2, 3), served("y", 0, 2, 3, 4)]
    assert service_jain(serial, 10.0) == pytest.approx(0.5)


def test_service_jain_spreads_output_tokens_and_clips_to_shared_backlog() -> None:
    # Both wait on [0, 4) (their second requests). x: 12 at t=1, then 2 tokens x 2 = 4
    # spread over 1..5, 3 of them before 4; y: 12 at t=2. Second requests come after 4.
    records = [
        served("x", 0, 0, 1, 5, tokens=3),
        served("x", 0, 4, 4.5, 5),
        served("y", 0, 2, 2, 3),
        served("y", 0, 4, 4.5, 6),
    ]
    expected = (15 / 4 + 12 / 4) ** 2 / (2 * ((15 / 4) ** 2 + (12 / 4) ** 2))
    assert service_jain(records, 10.0) == pytest.approx(expected)


def test_service_jain_weights_tokens_like_vtc() -> None:
    # Both wait on [0, 2). x: 10 prompt + 1 output token; y: 4 prompt + 4 output tokens,
    # 3 of them spread over 1..1.5. VTC's default weights (1, 2) make both 12.
    equal_cost = [
        served("x", 0, 1, 1, 1.5, prompt=10),
        served("x", 0, 2, 2.5, 3, prompt=0, tokens=0),
        served("y", 0, 1, 1, 1.5, prompt=4, tokens=4),
        served("y", 0, 2, 2.5, 3, prompt=0, tokens=0),
    ]
    assert service_jain(equal_cost, 10.0) == pytest.approx(1.0)
    flat = service_jain(equal_cost, 10.0, input_weight=1.0, output_weight=1.0)
    assert flat == pytest.approx((11 + 8) ** 2 / (2 * (11**2 + 8**2)))


def test_service_jain_is_none_without_two_tenants_backlogged_at_once() -> None:
    assert service_jain([served("x", 0, 1, 1, 2), served("x", 0.5, 2, 2, 3)], 10.0) is None
    apart = [served("x", 0, 1, 1, 2), served("y", 2, 3, 3, 4)]
    assert service_jain(apart, 10.0) is None
    m = metrics(run_of(apart))
    assert m["jain_fairness"] is None and m["jain_ttft"] == pytest.approx(1.0)
    # A running request's decode is not backlog: nothing waits here.
    decoding = [served("x", 0, 0, 0.5, 10, tokens=101), served("y", 1, 1, 1.5, 2)]
    assert service_jain(decoding, 10.0) is None
    # A request rejected on arrival (no finish time) never waits.
    rejected = [served("x", 0, 1, 1, 2), served("y", 0, None, None, None, reason="rejected")]
    assert service_jain(rejected, 10.0) is None


def test_service_jain_counts_a_request_still_waiting_until_the_end() -> None:
    # y's request is never scheduled: y waits on [0, 10), x on [0, 2), x gets 12 at t=1.
    records = [
        served("x", 0, 0, 1, 2),
        served("x", 0, 2, 3, 4),
        served("y", 0, None, None, None, tokens=0, reason=""),
    ]
    assert service_jain(records, 10.0) == pytest.approx(0.5)


def test_service_jain_counts_service_only_inside_each_tenants_shared_backlog() -> None:
    # x's prefill finishes at t=1, as y arrives: computed before both waited, not counted.
    # Both wait on [1, 2); y gets 12 at t=2.
    late = [served("x", 0, 0, 1, 1.1), served("x", 0, 2, 3, 4), served("y", 1, 2, 2, 2.1)]
    assert service_jain(late, 10.0) == pytest.approx(0.5)
    # Three tenants: x and y wait on [0, 2), z only on [0, 1); each gets 12 at t=0.5.
    # z's rate is over its own 1 s: 12 against 6 and 6.
    three = [served(t, 0, 0, 0.5, 0.6) for t in "xyz"] + [
        served("x", 0, 2, 3, 4),
        served("y", 0, 2, 3, 4),
        served("z", 0, 1, 3, 4),
    ]
    assert service_jain(three, 10.0) == pytest.approx(24**2 / (3 * (6**2 + 6**2 + 12**2)))


def test_service_jain_differs_from_the_ttft_index() -> None:
    # VTC-like: x and y get 12 each while both wait on [0, 2), so the service index is
    # 1.0, but x's second request then waits 20 s: mean TTFT 10.5 s against y's 1.55 s.
    reordered = [
        served("x", 0, 0.5, 1, 1.1),
        served("x", 0, 2, 20, 20.1),
        served("y", 0, 0.5, 1, 1.1),
        served("y", 0, 2, 2.1, 2.2),
    ]
    m = metrics(run_of(reordered))
    assert m["jain_fairness"] == pytest.approx(1.0)
    assert m["jain_ttft"] == pytest.approx(12.05**2 / (2 * (10.5**2 + 1.55**2)))
    # FCFS-like: equal mean TTFT (1.5 s each, TTFT index 1.0), but while both wait on
    # [0, 1) only x is served; y's 12 comes at t=1.5, after y stopped waiting.
    staggered = [served("x", 0, 0, 1, 1.1), served("x", 0, 1, 2, 2.1), served("y", 0, 1, 1.5, 2)]
    m = metrics(run_of(staggered))
    assert m["jain_ttft"] == pytest.approx(1.0)
    assert m["jain_fairness"] == pytest.approx(0.5)


def test_service_jain_scales_to_large_traces() -> None:
    rng = random.Random(0)
    records = []
    for i in range(20_000):
        arrival = rng.uniform(0, 300)
        scheduled = arrival + rng.uniform(0, 2)
        first = scheduled + rng.uniform(0.01, 0.5)
        end = first + rng.uniform(0, 5)
        records.append(served("xyz"[i % 3], arrival, scheduled, first, end, tokens=64))
    value = service_jain(records, 310.0)
    assert value is not None and 0.9 < value <= 1.0


def test_priority_breakdown_includes_queue_max() -> None:
    records = [
        rec("a", priority=0, arrival=0.0, scheduled=0.5, ttft=0.6),
        rec("b", priority=0, arrival=0.0, scheduled=2.0, ttft=2.1),
        rec("c", priority=1, arrival=0.0, scheduled=0.1, ttft=0.2),
        rec("d", priority=1, reason="rejected"),
    ]
    m = metrics(run_of(records))
    assert list(m["priorities"]) == ["0", "1"]
    assert m["priorities"]["0"]["queue_ms_max"] == pytest.approx(2000.0)
    assert m["priorities"]["1"]["rejected"] == 1
    assert m["queue_ms_max"] == pytest.approx(2000.0)


# ---------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=2, max_size=60), st.integers(min_value=1, max_value=99))
def test_percentile_matches_inclusive_quantiles(values: list[float], q: int) -> None:
    reference = statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    assert percentile(sorted(values), q) == pytest.approx(reference, rel=1e-9, abs=1e-6)


@given(st.lists(finite, min_size=1, max_size=60))
def test_percentile_ends_are_min_and_max(values: list[float]) -> None:
    ordered = sorted(values)
    assert percentile(ordered, 0) == ordered[0]
    assert percentile(ordered, 100) == ordered[-1]


@given(
    st.lists(st.tuples(finite, st.integers(min_value=0, max_value=5)), min_size=1, max_size=30),
    st.floats(min_value=0, max_value=100),
)
def test_weighted_percentile_equals_percentile_of_repeated_values(
    pairs: list[tuple[float, int]], q: float
) -> None:
    expanded = sorted(v for v, w in pairs for _ in range(w))
    if not expanded:
        with pytest.raises(ValueError):
            weighted_percentile(pairs, q)
        return
    expected = percentile(expanded, q)
    assert weighted_percentile(pairs, q) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_summaries_of_nothing_are_null() -> None:
    assert summary([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert weighted_summary([(1.0, 0)])["p50"] is None
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"outside 0\.\.100"):
        percentile([1.0], 101)


def test_jain_index() -> None:
    assert jain([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([0.0, 0.0]) == 1.0
    with pytest.raises(ValueError):
        jain([])
