"""One reason for "no interval" everywhere: results.json's ``no_interval``, its verdict line,
the command's summary, report.md and report.html say the same words, and an episode's
flag says what would measure it."""

from __future__ import annotations

import html as html_lib
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import schedkit

from schedkit.bench.stats.episodes import MAXIMUM, TOO_FEW


def _bursty_trace(path: Path) -> Path:
    """3,000 requests at 8 req/s but for a burst of 300 at 80 req/s in the middle: the
    burst overloads the engine for a while, the rest of the run does not queue."""
    rng = random.Random(3)
    rows, t = [], 0.0
    for i in range(3000):
        t += rng.expovariate(80.0 if 1350 <= i < 1650 else 8.0)
        prompt = int(rng.lognormvariate(6.5, 0.8)) + 16
        output = int(rng.lognormvariate(4.5, 0.6)) + 2
        rows.append({"arrival_s": round(t, 4), "prompt_tokens": prompt, "output_tokens": output})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("reasons")
    out = root / "out"
    proc = schedkit(
        "bench", "--workload", str(_bursty_trace(root / "trace.jsonl")), "--policy", "fcfs",
        "--policy", "shortest-prompt", "--slo-ttft-ms", "2000", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout, json.loads((out / "results.json").read_text())


def _words(text: str) -> str:
    """``text`` with its line wrapping and runs of spaces undone."""
    return " ".join(text.split())


def test_each_output_gives_a_row_the_same_reason_for_no_interval(
    run: tuple[Path, str, dict[str, Any]],
) -> None:
    out, stdout, results = run
    (comparison,) = results["comparisons"]
    md = (out / "report.md").read_text()
    page = html_lib.unescape((out / "report.html").read_text())
    cli = _words(stdout)
    reasons = set()
    for row in comparison["metrics"]:
        reason, label = row["no_interval"], row["label"]
        assert _words(row["verdict"]) in cli, label  # the command prints the JSON's line
        md_row = next(line for line in md.splitlines() if f" | {label} | " in line)
        cell = md_row.rstrip(" |").rsplit(" | ", 1)[1]
        html_row = re.search(rf"<td>{re.escape(label)}</td>.*?</tr>", page, re.S)
        assert html_row is not None, label
        if reason is None:  # an interval, the same in every output
            assert row["ci"] is not None and "95% CI " in row["verdict"], label
            assert cell in html_row.group(0) and "no interval" not in cell, label
            continue
        reasons.add("episode" if row["episode"] else reason)
        assert row["ci"] is None and f"({reason}): {row['tone']}" in row["verdict"], label
        assert cell == reason, (label, cell)  # report.md's interval column
        assert f"<td>{reason}</td>" in html_row.group(0), label  # report.html's, as text
    assert reasons == {MAXIMUM, TOO_FEW, "episode"}  # every kind of reason occurs here


def test_an_episode_is_said_with_its_span_arm_and_remedy_in_every_output(
    run: tuple[Path, str, dict[str, Any]],
) -> None:
    out, stdout, results = run
    (comparison,) = results["comparisons"]
    episodes = {row["label"]: row for row in comparison["metrics"] if row["episode"]}
    assert "p90 TTFT" in episodes  # the burst decides it: fcfs fell behind there
    p90 = episodes["p90 TTFT"]
    assert p90["tone"] == "inconclusive" and p90["episode"]["arm"] == "fcfs"
    start, end = p90["episode"]["from_s"], p90["episode"]["to_s"]
    assert 100.0 < start < end < 300.0  # the burst arrives at about 170-175 s
    assert (
        f"requests arriving {start:,.0f}-{end:,.0f} s, where fcfs's p90 TTFT"
        in (p90["no_interval"])
    )
    (flag,) = [f for f in comparison["flags"] if f["kind"] == "episode"]
    assert flag["metrics"] == list(episodes)
    assert "--replicates 5" in flag["message"] and "--window" in flag["message"]
    md = _words((out / "report.md").read_text())
    page = _words(html_lib.unescape((out / "report.html").read_text()))
    for text in (_words(stdout), md, page):
        assert _words(flag["message"]) in text
