"""report.md and the self-contained report.html with its inline SVG plots."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from schedkit.bench.metrics import compute_metrics
from schedkit.bench.records import RequestRecord, RunResult, TimelinePoint
from schedkit.bench.report import compare_arms, render_markdown, write_report
from schedkit.bench.svg import cdf_points, downsample, line_chart


def fake_run(policy: str, speed: float, n: int = 300, steps: int = 1500) -> RunResult:
    """A plausible arm: two tenants, two priorities, a few rejections, a long timeline."""
    rng = random.Random(7)  # the same request stream in every arm
    records = []
    for i in range(n):
        arrival = i * 0.05
        ttft = rng.lognormvariate(-2.5, 1.0) * speed
        tokens = rng.randint(1, 200)
        tpot = rng.uniform(0.01, 0.04) * speed
        rejected = i % 97 == 0
        records.append(
            RequestRecord(
                request_id=f"req-{i}",
                tenant="batch" if i % 3 else "chat",
                priority=i % 2,
                arrival_s=arrival,
                prompt_tokens=rng.randint(10, 500),
                max_tokens=tokens,
                output_tokens=0 if rejected else tokens,
                finish_reason="rejected" if rejected else "length",
                reject_reason="queue_full" if rejected else "",
                scheduled_s=None if rejected else arrival + ttft * 0.8,
                first_token_s=None if rejected else arrival + ttft,
                finish_s=None if rejected else arrival + ttft + tpot * (tokens - 1),
            )
        )
    timeline = [
        TimelinePoint(t=k * 0.01, waiting=int(20 * speed * (1 + (k % 300) / 100)), running=8,
                      kv_usage=min(1.0, 0.3 + 0.5 * speed * (k % 500) / 500))
        for k in range(steps)
    ]  # fmt: skip
    timeline[777].waiting = 999  # a spike that thinning must keep
    return RunResult(
        policy=policy,
        records=records,
        duration_s=20.0,
        steps=steps,
        preemptions=int(10 * speed),
        itl=[(0.02 * speed, 50), (0.05 * speed, 5)],
        timeline=timeline,
        kv_usage_mean=0.4 * speed,
        rejections={"queue_full": 4},
    )


def fake_results(runs: list[RunResult]) -> dict[str, Any]:
    slo = {"slo_ttft_ms": 200.0, "slo_tpot_ms": 50.0}
    metrics = [compute_metrics(r, **slo) for r in runs]
    return {
        "workload": {"name": "synthetic <chat>", "requests": 300, "rate_rps": 20.0},
        "engine": {"kind": "sim", "profile": {"gpu": "H100", "tp": 1}},
        "arms": [{"policy": r.policy, "metrics": m} for r, m in zip(runs, metrics, strict=True)],
        "comparisons": compare_arms(runs, metrics, **slo, seed=0, n_boot=100),
    }


def test_report_files_are_written(tmp_path: Path) -> None:
    runs = [fake_run("fcfs", 1.0), fake_run("sjf", 0.6), fake_run("<b>evil&name</b>", 1.0)]
    md_path, html_path = write_report(tmp_path / "out", fake_results(runs), runs)
    assert md_path == tmp_path / "out" / "report.md" and md_path.is_file()
    md, html = md_path.read_text(), html_path.read_text()

    for section in ("## Workload", "## Engine", "## Metrics", "## Comparisons", "## Tenants"):
        assert section in md
    assert "| Metric | fcfs | sjf |" in md
    assert "- p90 TTFT: sjf is " in md and "## Priorities" in md

    assert html.count("<svg") == 4
    for title in ("TTFT CDF", "TPOT CDF", "Waiting requests over time", "KV cache usage"):
        assert title in html
    assert "fcfs" in html and "sjf" in html
    assert "<b>evil" not in html and "&lt;b&gt;evil&amp;name&lt;/b&gt;" in html
    assert "synthetic &lt;chat&gt;" in html


def test_html_is_self_contained(tmp_path: Path) -> None:
    runs = [fake_run("fcfs", 1.0), fake_run("sjf", 0.6)]
    _, html_path = write_report(tmp_path, fake_results(runs), runs)
    html = html_path.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", html, re.I)
    assert "http" not in html
    assert "<script" not in html and "<link" not in html and "@import" not in html


def test_plot_lines_are_thinned_to_600_points(tmp_path: Path) -> None:
    runs = [fake_run("fcfs", 1.0, n=2000, steps=5000), fake_run("sjf", 0.6, n=2000, steps=5000)]
    _, html_path = write_report(tmp_path, fake_results(runs), runs)
    for points in re.findall(r'<polyline points="([^"]*)"', html_path.read_text()):
        assert 0 < len(points.split()) <= 600


def test_downsample_keeps_spikes_and_order() -> None:
    points = [(float(t), 1.0) for t in range(5000)]
    points[1234] = (1234.0, 50.0)
    thin = downsample(points)
    assert len(thin) <= 600
    assert (1234.0, 50.0) in thin
    assert [x for x, _ in thin] == sorted(x for x, _ in thin)
    assert downsample(points[:10]) == points[:10]


def test_cdf_points() -> None:
    assert cdf_points([3.0, 1.0, 2.0, 4.0]) == [(1.0, 25.0), (2.0, 50.0), (3.0, 75.0), (4.0, 100.0)]
    many = cdf_points(float(v) for v in range(10_000))
    assert len(many) <= 600 and many[0] == (0.0, 0.01) and many[-1] == (9999.0, 100.0)


def test_line_chart_axes_and_empty_chart() -> None:
    svg = line_chart(
        [("a", [(1.0, 10.0), (1000.0, 100.0)])],
        title="t",
        x_label="TTFT (ms)",
        y_label="y",
        log_x=True,
        y_max=100,
    )
    assert "TTFT (ms) (log scale)" in svg
    for tick in (">1<", ">10<", ">100<", ">1,000<"):
        assert tick in svg
    empty = line_chart([("a", [])], title="t", x_label="x", y_label="y")
    assert "no samples" in empty and empty.startswith("<svg")


def test_markdown_without_comparisons_or_tenants() -> None:
    run = RunResult(policy="fcfs", records=[], duration_s=0.0)
    metrics = compute_metrics(run, slo_ttft_ms=None, slo_tpot_ms=None)
    md = render_markdown({"arms": [{"policy": "fcfs", "metrics": metrics}], "comparisons": []})
    assert "## Metrics" in md and "## Comparisons" not in md and "## Tenants" not in md
    assert "| TTFT p50 (ms) | n/a |" in md
