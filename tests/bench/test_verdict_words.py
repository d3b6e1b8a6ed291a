"""One name per verdict: the headline, the reports' tables and badges, the command's summary
and results.json say ``better``, ``worse``, ``no meaningful difference`` or
``inconclusive`` alike, and a change under ``--min-effect`` is never a gain or a loss."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import schedkit
from test_compare import _run, _ttfts
from test_report import fake_data, fake_run

from schedkit.bench.report.render import render_html, render_markdown
from schedkit.bench.results import NO_DIFFERENCE, TONES, Results
from schedkit.bench.stats.compare import compare_arms

# Bursty arrivals of varied prompts: shortest-prompt is better on some metrics, worse on
# max TTFT, inconclusive on others and no different on throughput.
BURSTY = "gamma:rate=12,cv=4,n=1500"
NAMES = set(TONES)
OTHER_NAMES = ("possibly", "significant", "WORSE", "INCONCLUSIVE", "| same", ": same")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("words")
    proc = schedkit(
        "bench", "--workload", BURSTY, "--policy", "fcfs", "--policy", "shortest-prompt",
        "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout, json.loads((out / "results.json").read_text())


def _headline_names(summary: str) -> dict[str, str]:
    """Metric label -> the verdict the headline names it by."""
    named = {}
    for part in summary.split(": ", 1)[1].split("; "):
        name, _, labels = part.partition(" on ")
        for label in labels.split(", "):
            named[label] = name.removesuffix(" (leaning worse)").removesuffix(" (leaning better)")
    return named


def test_every_output_names_each_verdict_alike(run: tuple[Path, str, dict[str, Any]]) -> None:
    out, stdout, results = run
    (comparison,) = results["comparisons"]
    rows = comparison["metrics"]
    assert {row["tone"] for row in rows} == NAMES  # all four verdicts occur in this run
    headline = _headline_names(comparison["summary"])
    md = (out / "report.md").read_text()
    page = html_lib.unescape((out / "report.html").read_text())
    cli = {line.strip().split(":")[0]: line.strip() for line in stdout.splitlines()}
    for row in rows:
        tone, label = row["tone"], row["label"]
        assert row["verdict"].endswith(f"): {tone}"), row["verdict"]  # JSON's sentence
        assert cli[label].endswith(f"): {tone}"), cli[label]  # the command's summary
        md_row = next(line for line in md.splitlines() if f" | {label} | " in line)
        assert md_row.split(" | ")[0].strip("|* ") == tone, md_row  # report.md
        badge = re.search(rf'<span class="badge [\w-]+">([^<]+)</span></td><td>{label}<', page)
        assert badge is not None and badge.group(1) == tone, label  # report.html
        if tone == NO_DIFFERENCE:
            assert label not in headline
        else:
            assert headline[label] == tone, (label, comparison["summary"])
    for text in (comparison["summary"], stdout, md, page):
        assert not any(other in text for other in OTHER_NAMES)
    assert "text-transform:uppercase;color:#fff" not in page  # badges read as written


def test_a_change_under_the_minimum_effect_is_never_a_possible_gain_or_loss() -> None:
    ttfts = _ttfts(400)
    # Slower in every other stretch of 40 arrivals, faster in the rest: p50 TTFT moves by
    # 1.5% with an interval of -26% .. +23%.
    wobbly = [t * (1.4 if (i // 40) % 2 else 0.74) for i, t in enumerate(ttfts)]
    (out,) = compare_arms(
        [_run("fcfs", ttfts), _run("wobbly", wobbly)], slo_ttft_ms=None, slo_tpot_ms=None
    )
    p50 = next(row for row in out["metrics"] if row["metric"] == "ttft_p50_ms")
    assert abs(p50["rel"]) < out["min_effect"] and p50["tone"] == "inconclusive"
    assert p50["leaning"] is None  # no lean under the minimum effect
    assert _headline_names(out["summary"])["p50 TTFT"] == "inconclusive"
    assert "inconclusive on p50 TTFT" in out["summary"]  # not "leaning better" nor "possibly"
    assert "possibly" not in out["summary"]


def test_a_results_json_of_schema_2_reads_same_as_no_meaningful_difference() -> None:
    runs = [fake_run("fcfs", 1.0), fake_run("sjf", 0.6)]
    data = fake_data(runs)
    data["schema_version"] = 2
    for row in data["comparisons"][0]["metrics"]:
        if row["tone"] == NO_DIFFERENCE:
            row["tone"] = "same"  # as schema 2 wrote it
    results = Results.model_validate(data)
    tones = [row.tone for row in results.comparisons[0].metrics]
    assert "same" not in tones and NO_DIFFERENCE in tones
    assert f"| {NO_DIFFERENCE} | p50 TPOT |" in render_markdown(results)
    assert f'<span class="badge no-meaningful-difference">{NO_DIFFERENCE}</span>' in render_html(
        results, runs
    )
