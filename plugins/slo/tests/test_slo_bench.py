"""slo under ``schedkit bench``: the bench's --slo-ttft-ms is the target slo aims at."""

from __future__ import annotations

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.records import RunResult

# 75,000 prompt tokens/s arriving for ~5 s; slo assumes 20,000 tokens/s of prefill.
OVERLOAD = "poisson:rate=30,n=150,prompt=2000,output=16"


def bench_arm(slo_ttft_ms: float | None) -> RunResult:
    """The `slo` policy with its default options (ttft_ms = 1000), under the bench's flag."""
    spec = BenchSpec(workload=OVERLOAD, policies=["slo"], slo_ttft_ms=slo_ttft_ms)
    return Bench(spec).run_arm(0, 1.0)


def rejections(run: RunResult) -> list[str]:
    return [r.reject_reason for r in run.records if r.rejected]


def test_a_tighter_bench_slo_makes_slo_reject_more() -> None:
    tight, default, loose = (rejections(bench_arm(ms)) for ms in (300.0, 1000.0, 3000.0))
    assert len(tight) > len(default) > len(loose) > 0
    assert all(reason.endswith(" exceeds SLO 300 ms") for reason in tight)
    assert all(reason.endswith(" exceeds SLO 3000 ms") for reason in loose)


def test_a_bench_slo_equal_to_the_option_changes_nothing() -> None:
    def outcome(run: RunResult) -> list[tuple[str, str, float | None]]:
        return [(r.request_id, r.reject_reason, r.first_token_s) for r in run.records]

    assert outcome(bench_arm(1000.0)) == outcome(bench_arm(None))
