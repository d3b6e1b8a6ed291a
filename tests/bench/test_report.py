"""report.md and the self-contained report.html: summary first, plots, tables, settings last."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from schedkit.bench.report.plots import (
    SCATTER_POINTS,
    SCATTER_SLOWEST,
    THROUGHPUT_BINS,
    throughput,
    throughput_series,
)
from schedkit.bench.report.render import render_html, render_markdown, write_report
from schedkit.bench.report.svg import bar_chart, ccdf_points, cdf_points, downsample, line_chart
from schedkit.bench.report.tables import inline
from schedkit.bench.report.verdicts import TONES, comparison_summaries
from schedkit.bench.report.vllm_format import write_vllm_bench
from schedkit.bench.results import NO_DIFFERENCE, Results, _Model
from schedkit.bench.stats.compare import compare_arms
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.records import RequestRecord, RunResult, TimelinePoint

SLO = {"slo_ttft_ms": 200.0, "slo_tpot_ms": 50.0}


def fake_run(
    policy: str, speed: float, n: int = 300, steps: int = 1500, tenants: int = 2
) -> RunResult:
    """A plausible arm: tenants, two priorities, a few rejections and preemptions, a long
    timeline. Long prompts wait longest, as under a policy that starves them."""
    rng = random.Random(7)  # the same request stream in every arm
    records = []
    for i in range(n):
        arrival = i * 0.05
        prompt = rng.randint(10, 5000)
        ttft = rng.lognormvariate(-2.5, 1.0) * speed * (1 + prompt / 1000) ** 2
        tokens = rng.randint(1, 200)
        tpot = rng.uniform(0.01, 0.04) * speed
        rejected = i % 97 == 0
        records.append(
            RequestRecord(
                request_id=f"req-{i}",
                tenant=("chat", "batch", "eval")[i % tenants] if tenants > 1 else "default",
                priority=i % 2,
                arrival_s=arrival,
                prompt_tokens=prompt,
                max_tokens=tokens,
                output_tokens=0 if rejected else tokens,
                finish_reason="rejected" if rejected else "length",
                reject_reason="queue_full" if rejected else "",
                scheduled_s=None if rejected else arrival + ttft * 0.8,
                first_token_s=None if rejected else arrival + ttft,
                finish_s=None if rejected else arrival + ttft + tpot * (tokens - 1),
                preemptions=int(speed * 2) if i % 50 == 7 else 0,
            )
        )
    timeline = [
        TimelinePoint(t=k * 0.01, waiting=int(20 * speed * (1 + (k % 300) / 100)), running=8 + k % 5,
                      kv_usage=min(1.0, 0.3 + 0.5 * speed * (k % 500) / 500))
        for k in range(steps)
    ]  # fmt: skip
    timeline[777].waiting = 999  # a spike that thinning must keep
    return RunResult(
        policy=policy,
        records=records,
        duration_s=max((r.finish_s or 0.0) for r in records),
        steps=steps,
        preemptions=sum(r.preemptions for r in records),
        itl=[(0.02 * speed, 50), (0.05 * speed, 5)],
        timeline=timeline,
        kv_usage_mean=0.4 * speed,
        rejections={"queue_full": 4},
    )


def _row(
    metric: str, label: str, a: float, b: float, tone: str, unit: str = "ms"
) -> dict[str, Any]:
    rate = unit == "rate"
    diff = b - a
    rel = diff / a
    spread = 0.01 if tone != "inconclusive" else 0.3
    return {
        "metric": metric, "label": label, "unit": unit, "higher_is_better": rate, "a": a, "b": b,
        "diff": diff, "rel": rel, "ci": [diff - spread * abs(a), diff + spread * abs(a)],
        "rel_ci": [rel - spread, rel + spread], "significant": tone in ("better", "worse"),
        "sections": 12, "better": {"better": True, "worse": False}.get(tone), "tone": tone,
        "leaning": None, "verdict": f"{label}: {'pp' if rate else 'ms'} change, {tone}",
    }  # fmt: skip


def comparison(policy: str) -> dict[str, Any]:
    """A comparison as the bench writes it (schema 3), with every verdict and a flag."""
    return {
        "baseline": "fcfs",
        "policy": policy,
        "n_requests": 300,
        "summary": f"{policy} vs fcfs: worse on p99 TTFT; better on p50 TTFT, SLO attainment",
        "method": {"name": "paired sectioning", "max_sections": 12, "confidence": 0.95},
        "min_effect": 0.02,
        "metrics": [
            _row("ttft_p50_ms", "p50 TTFT", 144.09, 90.16, "better"),
            _row("tpot_p50_ms", "p50 TPOT", 32.7, 32.8, "no meaningful difference"),
            _row("ttft_p99_ms", "p99 TTFT", 29438.1, 82858.8, "worse"),
            _row("e2e_p90_ms", "p90 E2E", 7929.5, 8484.5, "inconclusive"),
            _row("slo_attainment", "SLO attainment", 0.6417, 0.9754, "better", "rate"),
        ],
        "verdicts": [],
        "flags": [{"kind": "starvation", "message": f"12 requests under {policy} waited longer"
                   " than the longest wait under fcfs (29.4 s)"}],
    }  # fmt: skip


def fake_data(runs: list[RunResult]) -> dict[str, Any]:
    """What results.json would hold for ``runs``: every arm after the first compared."""
    metrics = [
        compute_metrics(r, slo_ttft_ms=SLO["slo_ttft_ms"], slo_tpot_ms=SLO["slo_tpot_ms"])
        for r in runs
    ]
    return {
        "schema_version": 3,
        "provenance": {
            "schedkit_version": "0.2.0", "git_revision": "941cb60", "command": ["schedkit", "bench"],
            "python": "3.11.7", "numpy": "2.1.0", "platform": "Linux", "spec": {"seed": 0},
            "created_utc": "2026-01-01T00:00:00+00:00",
        },
        "workload": {
            "name": "synthetic <chat>", "source": "synthetic", "requests": 300,
            "span_s": 875.4304842499987, "rate_rps": 22.121687956287353, "prompt_p50": 900,
            "prompt_p90": 4000, "prompt_max": 5000, "output_p50": 100, "output_p90": 180,
            "output_max": 200, "tenants": ["batch", "chat"], "hash_block_tokens": 0,
            "rate_scale": 4.0, "seed": 0, "window_s": None, "max_requests": None,
        },
        "engine": {
            "engine": "sim", "model": "Llama-3-8B", "gpu": "H100-SXM", "tp": 1,
            "cost_model": {"kind": "roofline", "compute_efficiency": 0.7, "step_overhead_s": 0.0005},
            "enable_prefix_caching": True,
        },
        "slo": {"ttft_ms": 200.0, "tpot_ms": 50.0},
        "arms": [
            {"policy": r.policy, "config": {"policy": [r.policy], "options": {}},
             "engine_settings": {}, "engine": None, "metrics": m}
            for r, m in zip(runs, metrics, strict=True)
        ],
        "warnings": ["sjf relies on num_computed_tokens, which means something else on sglang"],
        "flags": [{"kind": "overload", "message": "fcfs: arrivals outpace completions"}],
        "comparisons": [comparison(r.policy) for r in runs[1:]],
    }  # fmt: skip


def fake_results(runs: list[RunResult]) -> Results:
    return Results.model_validate(fake_data(runs))


@pytest.fixture
def runs() -> list[RunResult]:
    return [fake_run("fcfs", 1.0), fake_run("sjf", 0.6)]


@pytest.fixture
def html(runs: list[RunResult]) -> str:
    return render_html(fake_results(runs), runs)


def _section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}"')
    return html[start : html.index("</section>", start)]


def _figure(html: str, key: str) -> str:
    start = html.index(f'<figure id="fig-{key}"')
    return html[start : html.index("</figure>", start)]


# ---------------------------------------------------------------------------
# layout: summary first, settings last
# ---------------------------------------------------------------------------


def test_sections_in_reading_order(html: str) -> None:
    at = [
        html.index(f'<section id="{name}"') for name in ("summary", "plots", "metrics", "settings")
    ]
    assert at == sorted(at)
    assert html.index("<h1>") < at[0]
    assert '<div class="grid">' in _section(html, "plots")
    assert "@media (max-width:900px)" in html  # two columns collapse to one


def test_summary_lists_flags_then_regressions_first(html: str) -> None:
    summary = _section(html, "summary")
    # run-level flags (red overload, amber capability warning) before the comparison
    overload = summary.index('<li class="flag alert"><span class="kind">overload')
    warning = summary.index('<li class="flag warn"><span class="kind">warning')
    starvation = summary.index('<li class="flag alert"><span class="kind">starvation')
    assert overload < warning < summary.index('<article class="comparison">') < starvation
    # the comparison's summary line without its repeated "sjf vs fcfs: " prefix
    assert "<h3>sjf vs fcfs" in summary
    assert (
        '<p class="headline">worse on p99 TTFT; better on p50 TTFT, SLO attainment</p>' in summary
    )
    tones = re.findall(r'<tr class="([\w-]+)"', summary)
    assert tones == ["worse", "better", "better", "inconclusive", "no-meaningful-difference"]
    assert summary.index("p99 TTFT") < summary.index("p50 TTFT") < summary.index("p90 E2E")
    tally = "1 worse · 2 better · 1 inconclusive · 1 no meaningful difference, 300 paired requests"
    assert tally in summary
    worse_row = summary[summary.index('<tr class="worse"') :].split("</tr>")[0]
    for cell in ("29.44 s", "82.86 s", "+181.5%", "+180.5% .. +182.5%"):
        assert f">{cell}<" in worse_row
    assert ">+33.4 pp<" in summary  # a rate changes in percentage points
    assert "up to 12 sections of consecutive arrivals, 95% confidence intervals" in summary
    assert "changes within ±2% are no meaningful difference" in summary


def test_markdown_reads_in_the_same_order(runs: list[RunResult]) -> None:
    md = render_markdown(fake_results(runs))
    heads = ["## Summary", "### sjf vs fcfs", "## Metrics", "### Per tenant", "## Settings"]
    at = [md.index(h) for h in heads]
    assert at == sorted(at)
    summary = md[at[0] : at[2]]
    assert summary.index("**ALERT** overload") < summary.index("**warning** sjf relies")
    assert "- **ALERT** starvation: 12 requests under sjf" in summary
    rows = [line.split(" | ")[0] for line in summary.splitlines() if line.startswith("| ")]
    assert rows[1:] == [
        "| **worse**",
        "| better",
        "| better",
        "| inconclusive",
        "| no meaningful difference",
    ]
    assert "| Verdict | Metric | fcfs | sjf | Change | 95% CI |" in summary
    assert "| Metric | fcfs | sjf |" in md
    assert "| span_s | 875.4 |" in md and "875.43" not in md
    assert "| cost_model | kind=roofline, compute_efficiency=0.7, step_overhead_s=0.0005 |" in md


def test_settings_are_folded_rounded_and_not_json(html: str) -> None:
    settings = _section(html, "settings")
    assert settings.startswith('<section id="settings"><details><summary>Settings: Workload,')
    assert "<details open" not in html
    assert "<th>span_s</th><td>875.4</td>" in settings
    assert "<th>rate_rps</th><td>22.12</td>" in settings and "22.1216" not in html
    assert "<th>rate_scale</th><td>4</td>" in settings
    assert "<th>tenants</th><td>batch, chat</td>" in settings
    assert '<span class="kv">kind=roofline</span>' in settings
    assert '<span class="kv">step_overhead_s=0.0005</span>' in settings
    assert "<th>enable_prefix_caching</th><td>true</td>" in settings
    assert "<th>schema_version</th><td>3</td>" in settings  # provenance
    assert '<span class="kv">policy=sjf</span>' in settings  # each arm's config
    assert "{&quot;" not in html and '{"' not in html  # no raw JSON anywhere
    # nothing of the settings comes before the plots
    assert html.index("875.4") > html.index('<section id="plots"')


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (875.4304842499987, "875.4"),
        (22.121687956287353, "22.12"),
        (0.0005, "0.0005"),
        (2000.0, "2000"),
        (True, "true"),
        (None, "none"),
        ({"a": 1, "b": {"c": 0.25}}, "(a=1, b=(c=0.25))"),
        ([], "none"),
    ],
)
def test_settings_values_are_written_for_people(value: object, text: str) -> None:
    assert inline(value) == text


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]
        for points in re.findall(r'<polyline points="([^"]*)"', svg)
    ]


def test_ttft_ccdf_is_log_log_and_keeps_the_tail(html: str) -> None:
    ccdf = _figure(html, "ttft-ccdf")
    assert "TTFT (ms) (log scale)" in ccdf and "fraction with TTFT ≥ x (log scale)" in ccdf
    # a log y axis from 1 down to a power of ten below 1/n
    assert ">1</text>" in ccdf and ">0.1</text>" in ccdf and ">0.01</text>" in ccdf
    assert "SLO 200 ms" in ccdf  # the target as a reference line
    for line in _polylines(ccdf):  # falls left to right, to the bottom of the plot area
        ys = [y for _, y in line]
        assert ys == sorted(ys) and max(ys) > 200 and min(ys) < 40


def test_ccdf_points_thin_evenly_and_in_the_tail() -> None:
    assert ccdf_points([3.0, 1.0, 2.0, 4.0]) == [(1.0, 1.0), (2.0, 0.75), (3.0, 0.5), (4.0, 0.25)]
    many = ccdf_points(float(v) for v in range(100_000))
    assert len(many) <= 600 and many[0] == (0.0, 1.0) and many[-1] == (99_999.0, 1e-05)
    tail = {v for v, _ in many}
    assert all(float(v) in tail for v in range(99_990, 100_000))  # the last ten requests
    assert sum(v < 50_000 for v in tail) > 100  # and the body too


def test_scatter_is_downsampled_and_pairs_the_same_requests() -> None:
    n = 5000
    runs = [fake_run("fcfs", 1.0, n=n), fake_run("sjf", 0.6, n=n)]
    svg = _figure(render_html(fake_results(runs), runs), "ttft-prompt")
    assert "prompt (tokens) (log scale)" in svg and "TTFT (ms) (log scale)" in svg
    groups = re.findall(r'<g class="dots" fill="[^"]+">(.*?)</g>', svg, re.S)
    assert len(groups) == 2
    counts = [g.count("<circle") for g in groups]
    assert all(SCATTER_POINTS // 2 < c <= SCATTER_POINTS + SCATTER_SLOWEST for c in counts)
    xs = [sorted(re.findall(r'cx="([\d.]+)"', g)) for g in groups]
    assert len(set(xs[0]) & set(xs[1])) > SCATTER_POINTS // 2  # same prompts in both arms


def test_over_time_and_group_figures(html: str) -> None:
    for key, title in [
        ("ttft-tenants", "TTFT p90 per tenant"),
        ("ttft-priorities", "TTFT p90 per priority"),
        ("waiting", "Queue length"),
        ("running", "Batch size"),
        ("throughput", "Output throughput"),
        ("preemptions", "Preemptions (cumulative)"),
        ("kv-usage", "KV cache usage"),
        ("tpot-ccdf", "TPOT tail (CCDF)"),
    ]:
        figure = _figure(html, key)
        assert title in figure and "<figcaption>" in figure
    assert _figure(html, "ttft-tenants").count('class="bar"') == 4  # 2 tenants x 2 arms
    assert "counted at its finish" in _figure(html, "preemptions")  # says what it can't know
    for line in _polylines(_figure(html, "preemptions")):  # cumulative: never falls
        ys = [y for _, y in line]
        assert ys == sorted(ys, reverse=True)


def test_no_tenant_chart_for_one_tenant_and_no_preemptions_said() -> None:
    runs = [fake_run("fcfs", 0.4, tenants=1), fake_run("sjf", 0.4, tenants=1)]
    html = render_html(fake_results(runs), runs)
    assert 'id="fig-ttft-tenants"' not in html and 'id="fig-ttft-priorities"' in html
    assert "no preemptions in any arm" in _figure(html, "preemptions")


def test_throughput_bins_add_up_to_the_tokens(runs: list[RunResult]) -> None:
    figure = throughput(runs)
    assert figure.key == "throughput" and "spread evenly" in figure.caption
    end = max(r.duration_s for r in runs)
    width = end / THROUGHPUT_BINS
    for run, (_, points) in zip(runs, throughput_series(runs), strict=True):
        assert len(points) == THROUGHPUT_BINS
        total = sum(r.output_tokens for r in run.records if r.first_token_s is not None)
        assert sum(y * width for _, y in points) == pytest.approx(total)


def test_plot_lines_are_thinned_to_600_points(tmp_path: Path) -> None:
    runs = [fake_run("fcfs", 1.0, n=2000, steps=5000), fake_run("sjf", 0.6, n=2000, steps=5000)]
    _, html_path = write_report(tmp_path, fake_results(runs), runs)
    lines = _polylines(html_path.read_text())
    assert lines and all(0 < len(points) <= 600 for points in lines)


# ---------------------------------------------------------------------------
# files, escaping, older results
# ---------------------------------------------------------------------------


def test_report_files_are_written_and_names_escaped(tmp_path: Path) -> None:
    runs = [fake_run("fcfs", 1.0), fake_run("sjf", 0.6), fake_run("<b>evil&name</b>", 1.0)]
    md_path, html_path = write_report(tmp_path / "out", fake_results(runs), runs)
    assert md_path == tmp_path / "out" / "report.md" and md_path.is_file()
    html = html_path.read_text()
    assert html.count('<article class="comparison">') == 2
    assert "<b>evil" not in html and "&lt;b&gt;evil&amp;name&lt;/b&gt;" in html
    assert "synthetic &lt;chat&gt;" in html
    assert html.count("<svg") == 10


def test_the_report_reads_the_models_by_attribute(
    runs: list[RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not through the dict-like layer kept for outside callers (``model["key"]``, ``get``,
    ``in``)."""
    results = fake_results(runs)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report read a result model as a dict")

    for name in ("__getitem__", "get", "__contains__"):
        monkeypatch.setattr(_Model, name, refused)
    write_report(tmp_path, results, runs)
    write_vllm_bench(tmp_path, results, runs, slo_ttft_ms=200.0, slo_tpot_ms=50.0)


def test_html_is_self_contained(html: str) -> None:
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "url(" not in html  # no fonts or images fetched from CSS either


POINT_COMPARISON = {  # no flags, no intervals for a maximum, counts, no minimum effect
    "baseline": "fcfs",
    "policy": "sjf",
    "n_requests": 0,
    "summary": "sjf vs fcfs: worse on p90 TTFT; better on p50 TTFT",
    "method": {"name": "paired sectioning", "max_sections": 0, "confidence": 0.9},
    "min_effect": 0.0,
    "metrics": [
        {**_row("ttft_p50_ms", "p50 TTFT", 144.0, 90.0, "better"), "ci": [-59.0, -48.5],
         "rel_ci": [-0.393, -0.35]},
        {**_row("ttft_p90_ms", "p90 TTFT", 200.0, 400.0, "worse"), "ci": [150.0, 250.0],
         "rel_ci": [0.75, 1.25]},
        {**_row("queue_max_ms", "max queue", 12000.0, 9000.0, NO_DIFFERENCE), "ci": None,
         "rel_ci": None},
        {**_row("rejected", "rejected", 4.0, 4.0, NO_DIFFERENCE, "count"), "rel": None, "ci": None,
         "rel_ci": None, "label": ""},
        _row("slo_attainment", "SLO attainment", 0.5, 0.51, "inconclusive", "rate"),
    ],
    "verdicts": [],
    "flags": [],
}  # fmt: skip


def test_point_values_counts_and_a_bare_method_render(runs: list[RunResult]) -> None:
    data = fake_data(runs)
    data.update(comparisons=[POINT_COMPARISON], flags=[], warnings=[])
    results = Results.model_validate(data)
    (summary,) = comparison_summaries(results)
    tones = [v.tone for v in summary.verdicts]
    assert tones == ["worse", "better", "inconclusive", NO_DIFFERENCE, NO_DIFFERENCE]
    assert summary.headline == POINT_COMPARISON["summary"]
    assert summary.method == "paired sectioning, 90% confidence intervals"
    html = render_html(results, runs)
    classes = re.findall(r'<tr class="([\w-]+)"', _section(html, "summary"))
    assert classes == [t.replace(" ", "-") for t in tones]
    assert 'class="flag' not in html and "paired requests" not in html
    md = render_markdown(results)
    assert "| **worse** | p90 TTFT | 200.0 ms | 400.0 ms | +100.0% | +75.0% .. +125.0% |" in md
    assert f"| {NO_DIFFERENCE} | max queue | 12.00 s | 9,000.0 ms | -25.0% | no interval |" in md
    assert f"| {NO_DIFFERENCE} | rejected | 4 | 4 | +0.0 | no interval |" in md  # label
    assert (
        "| inconclusive | SLO attainment | 50.0% | 51.0% | +1.0 pp | -14.0 pp .. +16.0 pp |" in md
    )
    assert "| Verdict | Metric | fcfs | sjf | Change | 90% CI |" in md


def test_comparisons_from_the_bench_render(runs: list[RunResult]) -> None:
    """Whatever compare_arms writes today renders, every row with a known tone."""
    data = fake_data(runs)
    data["comparisons"] = compare_arms(runs, slo_ttft_ms=200.0, slo_tpot_ms=50.0)
    results = Results.model_validate(data)
    (summary,) = comparison_summaries(results)
    assert summary.verdicts and all(v.tone in TONES for v in summary.verdicts)
    order = [TONES.index(v.tone) for v in summary.verdicts]
    assert order == sorted(order)
    assert "sjf vs fcfs" in render_markdown(results)
    assert '<section id="summary"' in render_html(results, runs)


def test_one_arm_without_comparisons_or_tenants() -> None:
    run = RunResult(policy="fcfs", records=[], duration_s=0.0)
    data = fake_data([run])
    data["workload"].update(tenants=["default"], rate_scale=1.0)
    data.update(engine={}, slo={"ttft_ms": None, "tpot_ms": None}, flags=[], warnings=[])
    data["arms"][0]["metrics"] = compute_metrics(run, slo_ttft_ms=None, slo_tpot_ms=None)
    results = Results.model_validate(data)
    md = render_markdown(results)
    assert "One arm: nothing to compare." in md and "### Per tenant" not in md
    assert "| TTFT p50 (ms) | n/a |" in md
    assert "fcfs alone · synthetic <chat>: 300 requests over 875 s\n" in md  # no engine, SLO
    assert "### Engine" not in md and "| ttft_ms | none |" in md
    html = render_html(results, [run])
    assert "One arm: nothing to compare." in html and "no samples" in html
    assert 'class="flag' not in html


# ---------------------------------------------------------------------------
# svg helpers
# ---------------------------------------------------------------------------


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


def test_line_chart_log_axes_ticks_and_empty_chart() -> None:
    svg = line_chart(
        [("a", [(1.0, 1.0), (1000.0, 2e-5)])],
        title="t",
        x_label="TTFT (ms)",
        y_label="y",
        log_x=True,
        log_y=True,
    )
    assert "TTFT (ms) (log scale)" in svg and "y (log scale)" in svg
    for tick in (">1<", ">10<", ">100<", ">1,000<", ">0.001<", ">10⁻⁴<"):
        assert tick in svg
    linear = line_chart([("a", [(0.0, 0.5), (10.0, 3.0)])], title="t", x_label="x", y_label="y")
    assert "log scale" not in linear
    # log asked for but the values span less than a decade: linear, and said so by omission
    narrow = line_chart([("a", [(5.0, 1.0), (8.0, 0.5)])], title="t", x_label="x", y_label="y",
                        log_x=True, log_y=True)  # fmt: skip
    assert "log scale" not in narrow
    empty = line_chart([("a", [])], title="t", x_label="x", y_label="y", empty="nothing here")
    assert "nothing here" in empty and empty.startswith("<svg")


def test_bar_chart_groups_and_gaps() -> None:
    svg = bar_chart(["a", "b"], [("p", [1.0, None]), ("q", [2.0, 3.0])], title="t", y_label="y")
    assert svg.count('class="bar"') == 3
    assert "no samples" in bar_chart([], [], title="t", y_label="y")
