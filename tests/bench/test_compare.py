"""A/B verdicts: every metric judged, regressions named first, flags for what intervals miss."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from schedkit.bench.stats.compare import (
    METRIC_KEYS,
    check_metrics,
    check_min_effect,
    compare_arms,
    summary_line,
)
from schedkit.bench.stats.flags import overload, policy_faults
from schedkit.bench.stats.sectioning import section_edges
from schedkit.errors import SchedkitError
from schedkit.records import RequestRecord, RunResult


def _record(i: int, ttft: float, *, tenant: str = "a", rejected: bool = False) -> RequestRecord:
    arrival = i * 0.1
    r = RequestRecord(
        request_id=f"r{i}",
        tenant=tenant,
        priority=0,
        arrival_s=arrival,
        prompt_tokens=100,
        max_tokens=10,
        output_tokens=0 if rejected else 10,
        finish_reason="rejected" if rejected else "length",
    )
    if not rejected:
        r.scheduled_s = arrival + ttft * 0.5
        r.first_token_s = arrival + ttft
        r.finish_s = arrival + ttft + 0.9
        r.cached_tokens = 20
    return r


def _run(name: str, ttfts: list[float], **kwargs: Any) -> RunResult:
    tenants = kwargs.pop("tenants", None)
    rejected = kwargs.pop("rejected", set())
    records = [
        _record(i, t, tenant=tenants[i % len(tenants)] if tenants else "a", rejected=i in rejected)
        for i, t in enumerate(ttfts)
    ]
    duration = max((r.finish_s or 0.0) for r in records)
    return RunResult(policy=name, records=records, duration_s=duration, **kwargs)


def _ttfts(n: int, seed: int = 5) -> list[float]:
    rng = random.Random(seed)
    return [rng.expovariate(10) for _ in range(n)]


def _rows(comparison: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["metric"]: row for row in comparison["metrics"]}


def test_every_headline_metric_gets_a_verdict_with_its_interval() -> None:
    base = _run("fcfs", _ttfts(7000))
    faster = _run("fast", [t * 0.5 for t in _ttfts(7000)])
    (out,) = compare_arms([base, faster], slo_ttft_ms=150, slo_tpot_ms=None)
    rows = _rows(out)
    assert set(rows) == set(METRIC_KEYS)
    for key in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "slo_attainment"):
        assert rows[key]["tone"] == "better" and rows[key]["ci"] is not None, key
    assert rows["ttft_p90_ms"]["rel"] == pytest.approx(-0.5)
    assert "-50.0% (95% CI " in rows["ttft_p90_ms"]["verdict"]
    assert rows["ttft_max_ms"]["ci"] is None and "no interval" in rows["ttft_max_ms"]["verdict"]
    for key in ("throughput_tok_s", "rejected_share", "preemptions", "prefix_hit_rate"):
        assert rows[key]["tone"] == "no meaningful difference", key  # unchanged
    assert out["summary"].startswith("fast vs fcfs: better on p50 TTFT, p90 TTFT")
    assert rows["ttft_p50_ms"]["sections"] == 10 and rows["ttft_p99_ms"]["sections"] >= 5
    json.dumps(out)


def test_too_few_requests_for_a_tail_interval_is_inconclusive_not_a_claim() -> None:
    base = _run("fcfs", _ttfts(400))
    slower = _run("slow", [t * 1.5 for t in _ttfts(400)])
    (out,) = compare_arms([base, slower], slo_ttft_ms=None, slo_tpot_ms=None)
    p99, p50 = _rows(out)["ttft_p99_ms"], _rows(out)["ttft_p50_ms"]
    assert p99["ci"] is None and p99["sections"] == 0 and p99["tone"] == "inconclusive"
    assert "no interval: too few requests for five sections" in p99["verdict"]
    assert p50["tone"] == "worse" and p50["sections"] == 10
    worse, inconclusive = out["summary"].split("; ")
    assert "p50 TTFT" in worse and "p99 TTFT" in inconclusive and "p50" not in inconclusive


def test_identical_arms_are_no_meaningful_difference_not_worse() -> None:
    base, twin = _run("fcfs", _ttfts(300)), _run("fcfs#2", _ttfts(300))
    (out,) = compare_arms([base, twin], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)
    assert {row["tone"] for row in out["metrics"]} == {"no meaningful difference"}
    assert all(row["better"] is None for row in out["metrics"])
    assert "slo_attainment" not in _rows(out)  # no target anywhere
    assert out["summary"] == "fcfs#2 vs fcfs: no meaningful difference on any compared metric"
    assert out["flags"] == []


def test_a_change_below_the_minimum_effect_is_no_meaningful_difference() -> None:
    base = _run("fcfs", _ttfts(400))
    slightly = _run("tweak", [t * 0.99 for t in _ttfts(400)])  # 1% faster, every request
    kwargs: dict[str, Any] = {"slo_ttft_ms": None, "slo_tpot_ms": None, "seed": 0}
    (loose,) = compare_arms([base, slightly], **kwargs)
    assert _rows(loose)["ttft_p50_ms"]["tone"] == "no meaningful difference"
    assert _rows(loose)["ttft_p50_ms"]["significant"]  # real, but below 2%
    (strict,) = compare_arms([base, slightly], min_effect=0.0, **kwargs)
    assert _rows(strict)["ttft_p50_ms"]["tone"] == "better"


def test_a_tail_regression_is_named_first_and_starvation_is_counted() -> None:
    ttfts = _ttfts(600)
    base = _run("fcfs", ttfts)
    # Faster for most requests, but every 50th waits far past fcfs's longest wait.
    starve = [t * 0.5 if i % 50 else 30.0 + i / 100 for i, t in enumerate(ttfts)]
    other = _run("sjf", starve)
    (out,) = compare_arms([base, other], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)
    rows = _rows(out)
    assert rows["ttft_p50_ms"]["tone"] == "better"
    assert rows["ttft_max_ms"]["tone"] == "worse"
    assert rows["ttft_max_ms"]["verdict"].endswith("(a maximum has no interval): worse")
    assert rows["ttft_p99_ms"]["tone"] in ("worse", "inconclusive")
    assert out["summary"].startswith("sjf vs fcfs: worse on ")
    assert out["summary"].index("worse") < out["summary"].index("better")
    (starved,) = [f for f in out["flags"] if f["kind"] == "starvation"]
    assert starved["count"] == 12 and starved["worst_wait_s"] > 15.0
    assert "12 requests under sjf waited more than 2% longer" in starved["message"]


def test_rejecting_requests_is_flagged_and_judged() -> None:
    ttfts = _ttfts(400)
    base = _run("fcfs", ttfts)
    picky = _run("admit", [t * 0.2 for t in ttfts], rejected=set(range(0, 400, 10)))
    (out,) = compare_arms([base, picky], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)
    rows = _rows(out)
    assert rows["rejected_share"]["tone"] == "worse"
    assert rows["rejected_share"]["diff"] == pytest.approx(0.1)
    assert "+10.0 pp" in rows["rejected_share"]["verdict"]
    (flag,) = [f for f in out["flags"] if f["kind"] == "rejections"]
    assert flag["rejected"] == 40 and "10.0% of requests" in flag["message"]
    assert "worse on " in out["summary"] and "rejected share" in out["summary"]


def test_tenants_get_their_own_rows() -> None:
    ttfts = _ttfts(2000)
    base = _run("fcfs", ttfts, tenants=["a", "b"])
    # Tenant b (odd requests) gets slower, tenant a faster.
    mixed = _run(
        "vtc", [t * (3.0 if i % 2 else 0.5) for i, t in enumerate(ttfts)], tenants=["a", "b"]
    )
    (out,) = compare_arms([base, mixed], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)
    rows = _rows(out)
    assert rows["tenant:a:ttft_p90_ms"]["tone"] == "better"
    assert rows["tenant:b:ttft_p90_ms"]["tone"] == "worse"
    assert rows["tenant:b:ttft_p90_ms"]["label"] == "p90 TTFT of tenant b"


def test_pairs_follow_request_ids_not_record_order() -> None:
    ttfts = _ttfts(200)
    base, same = _run("fcfs", ttfts), _run("fcfs#2", ttfts)
    same.records.reverse()
    (out,) = compare_arms([base, same], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)
    assert all(row["ci"] in (None, [0.0, 0.0]) for row in out["metrics"])
    with pytest.raises(SchedkitError, match="replayed different requests"):
        compare_arms([base, _run("x", ttfts[:10])], slo_ttft_ms=None, slo_tpot_ms=None, seed=0)


def test_policy_faults_and_overload_flags() -> None:
    clean = _run("fcfs", _ttfts(50))
    assert policy_faults(clean) is None and overload(clean) is None
    faulty = _run("bad", _ttfts(50), policy_errors=7, policy_errors_by_hook={"order_waiting": 7})
    flag = policy_faults(faulty)
    assert flag is not None and flag["errors"] == 7 and "order_waiting 7" in flag["message"]
    # Arrivals every 0.1 s, service 1 s each, one at a time: the backlog only grows.
    records = [_record(i, 0.0) for i in range(200)]
    for i, r in enumerate(records):
        r.scheduled_s = r.first_token_s = float(i)
        r.finish_s = float(i + 1)
    late = overload(RunResult(policy="slow", records=records, duration_s=200.0))
    assert late is not None and late["backlog"][0] < late["backlog"][1] < late["backlog"][2]
    assert "arrivals outpace completions" in late["message"]


def test_summary_names_each_verdict_as_the_rows_do_regressions_first() -> None:
    rows: list[dict[str, str | None]] = [
        {"label": "p50 TTFT", "tone": "better", "leaning": None},
        {"label": "p99 TTFT", "tone": "inconclusive", "leaning": "worse"},
        {"label": "p90 TPOT", "tone": "no meaningful difference", "leaning": None},
        {"label": "max TTFT", "tone": "worse", "leaning": None},
    ]
    line = summary_line("b", "a", rows)
    assert line == (
        "b vs a: worse on max TTFT; better on p50 TTFT; inconclusive (leaning worse) on p99 TTFT"
    )
    rows[1]["leaning"] = None  # a change under the minimum effect: no lean
    assert summary_line("b", "a", rows).endswith("; inconclusive on p99 TTFT")


def test_bad_verdict_arguments_name_the_value_and_the_valid_range() -> None:
    with pytest.raises(SchedkitError, match=r"unknown verdict metric 'ttft_p42'.*ttft_p50_ms"):
        check_metrics(["ttft_p42"])
    assert check_metrics(["ttft_p99_ms", "ttft_p99_ms"]) == ("ttft_p99_ms",)
    with pytest.raises(SchedkitError, match=r"--min-effect -0.1 is outside 0 \.\. 1"):
        check_min_effect(-0.1)


def test_starvation_needs_a_wait_past_the_baselines_longest_by_the_minimum_effect() -> None:
    ttfts = _ttfts(600)
    longest = max(ttfts) * 0.5  # the baseline's longest wait: half its longest TTFT
    base = _run("fcfs", ttfts)
    # Every 50th request waits 1% longer than the baseline's longest wait: the same wait
    # within the 2% minimum effect, not starvation.
    near = [t if i % 50 else 2 * longest * 1.01 for i, t in enumerate(ttfts)]
    (out,) = compare_arms([base, _run("near", near)], slo_ttft_ms=None, slo_tpot_ms=None)
    assert not [f for f in out["flags"] if f["kind"] == "starvation"]
    # Half as long again: starvation, said with by how much.
    far = [t if i % 50 else 2 * longest * 1.5 for i, t in enumerate(ttfts)]
    (out,) = compare_arms([base, _run("far", far)], slo_ttft_ms=None, slo_tpot_ms=None)
    (starved,) = [f for f in out["flags"] if f["kind"] == "starvation"]
    assert starved["count"] == 12
    assert starved["excess_s"] == pytest.approx(0.5 * longest)
    assert starved["excess_rel"] == pytest.approx(0.5)
    assert starved["message"].endswith(f"{0.5 * longest:,.1f} s (+50.0%) longer")
    assert "waited more than 2% longer than the longest wait under fcfs" in starved["message"]
    (strict,) = compare_arms(
        [base, _run("near", near)], slo_ttft_ms=None, slo_tpot_ms=None, min_effect=0.0
    )
    assert [f["count"] for f in strict["flags"] if f["kind"] == "starvation"] == [12]


def test_a_difference_resting_on_one_episode_gets_its_span_not_an_interval() -> None:
    ttfts = _ttfts(7000)
    # Alike but for requests 3000-3999 (arriving 300-400 s), 20 s behind under fcfs.
    base = _run("fcfs", [t + 20.0 if 3000 <= i < 4000 else t for i, t in enumerate(ttfts)])
    other = _run("sjf", ttfts)
    (out,) = compare_arms([base, other], slo_ttft_ms=None, slo_tpot_ms=None, rate_scale=4.0)
    rows = _rows(out)
    p90 = rows["ttft_p90_ms"]
    assert p90["ci"] is None and p90["rel_ci"] is None and p90["sections"] == 0
    assert p90["tone"] == "inconclusive" and p90["leaning"] == "better"
    episode = p90["episode"]
    assert episode["arm"] == "fcfs" and episode["share"] > 0.99
    # The sections holding requests 3000-3999 (arrivals 0.1 s apart), no more.
    edges = section_edges(7000, episode["of"])
    first, last = episode["sections"]
    assert edges[first - 1] <= 3000 < edges[first] and edges[last - 1] <= 3999 < edges[last]
    start, end = edges[first - 1] * 0.1, (edges[last] - 1) * 0.1
    assert episode["from_s"] == pytest.approx(start) and episode["to_s"] == pytest.approx(end)
    reason = p90["no_interval"]
    assert reason.startswith("no interval: one episode carries 100% of the difference")
    assert f"requests arriving {start:.0f}-{end:.0f} s, where fcfs's p90 TTFT was 20." in reason
    assert p90["verdict"].endswith(f"({reason}): inconclusive")
    assert "-100.0%" not in p90["verdict"]  # no clipped interval
    assert rows["ttft_max_ms"]["no_interval"] == "a maximum has no interval"
    assert rows["throughput_tok_s"]["no_interval"] is None  # alike: an interval
    (flag,) = [f for f in out["flags"] if f["kind"] == "episode"]
    assert {"p50 TTFT", "p90 TTFT", "p90 E2E"} <= set(flag["metrics"])
    window = [float(math.floor(start * 4)), float(math.floor(end * 4) + 1)]  # --rate-scale 4
    assert flag["suggested_window"] == window
    assert "--replicates 5" in flag["message"]
    assert f"--window {window[0]:g}:{window[1]:g}" in flag["message"]
    assert "inconclusive (leaning better) on p50 TTFT, p90 TTFT" in out["summary"]


def test_a_count_from_a_zero_baseline_prints_its_interval_in_counts() -> None:
    ttfts = _ttfts(7000)
    base = _run("fcfs", ttfts)
    other = _run("preempting", ttfts)
    for i, record in enumerate(other.records):
        record.preemptions = int(i % 7 == 0)  # 1,000 preemptions, all through the run
    (out,) = compare_arms([base, other], slo_ttft_ms=None, slo_tpot_ms=None)
    row = _rows(out)["preemptions"]
    assert row["a"] == 0.0 and row["rel"] is None and row["ci"] is not None
    assert "no interval" not in row["verdict"]  # it said "too few requests" with 9 sections
    lo, hi = row["ci"]
    assert f"+1,000.0 (95% CI +{lo:,.1f} .. +{hi:,.1f}): worse" in row["verdict"]
    assert row["sections"] >= 5 and row["no_interval"] is None
