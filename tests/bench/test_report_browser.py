"""report.html in a real browser: headless Chromium lays it out and draws it.

A layout probe (a script added to a copy of the report; the report itself has none)
measures what a reader sees: what the arms ran differently and the summary above the plots,
every verdict's badge reading as its name, plots in two columns on a wide
window and one on a narrow one, every chart drawn at a readable size, the settings
folded, and nothing fetched. A screenshot shows the regression's red row on the first
screen. Chromium is required, not optional: ``make test`` installs it
(``benchmarks/report/install-chromium.sh``); without it these tests fail and say how.
"""

from __future__ import annotations

import html as html_lib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from test_report import fake_data, fake_results, fake_run

from schedkit.bench.report.render import write_report
from schedkit.bench.results import TONES, Results

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "report" / "screenshot.py"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

PROBE = """<script>(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: Math.round(r.left), top: Math.round(r.top + scrollY),
            width: Math.round(r.width), height: Math.round(r.height)}; };
  const q = (s) => document.querySelector(s), all = (s) => [...document.querySelectorAll(s)];
  const worse = q("#summary tr.worse td");
  const ran = q("#arm-engines"), differs = q("#arm-engines tr.differs td");
  const out = {
    width: innerWidth,
    sections: ["summary", "plots", "metrics", "settings"].map((id) => box(q("#" + id)).top),
    figures: all("#plots figure").map(box),
    svgs: all("svg.plot").map(box),
    firstVerdict: q("#summary tbody tr").className,
    worseBackground: worse ? getComputedStyle(worse).backgroundColor : null,
    alerts: all("#summary .flag.alert").length,
    badges: all("#summary .badge").map((b) => b.innerText),
    armEngines: ran && ran.checkVisibility() ? box(ran) : null,
    armEngineRows: all("#arm-engines tbody tr").map((tr) => tr.innerText.split("\t")),
    differsBackground: differs ? getComputedStyle(differs).backgroundColor : null,
    settingsOpen: q("#settings details").open,
    settingsShown: q("#settings table").checkVisibility(),
    settingsHeight: box(q("#settings details")).height,
    resources: performance.getEntriesByType("resource").length,
  };
  const pre = document.createElement("pre");
  pre.id = "probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();</script>"""


@pytest.fixture(scope="module")
def chromium_bin() -> str:
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, NAMES)), None)
    if not found:
        pytest.fail(
            "headless Chromium is required for the report's browser test and was not found;"
            " install it with benchmarks/report/install-chromium.sh (`make browser`), as root:"
            " apt-get install -y chromium",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = [fake_run("fcfs", 1.0, n=2000, steps=3000), fake_run("sjf", 0.6, n=2000, steps=3000)]
    _, html_path = write_report(tmp_path_factory.mktemp("report"), fake_results(runs), runs)
    return html_path


@pytest.fixture(scope="module")
def engine_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Arms that ran on different engines: sjf with max_num_seqs 64 and fewer blocks."""
    runs = [fake_run("fcfs", 1.0, n=2000, steps=3000), fake_run("sjf", 0.6, n=2000, steps=3000)]
    data = fake_data(runs)
    data["engine"].update(max_num_seqs=256, num_blocks=13179)
    data["arms"][1].update(
        engine_settings={"max_num_seqs": 64, "gpu_memory_utilization": 0.85},
        engine={**data["engine"], "max_num_seqs": 64, "num_blocks": 11908},
    )
    data["provenance"]["spec"] = {"settings": {"gpu_memory_utilization": 0.9}}
    results = Results.model_validate(data)
    _, html_path = write_report(tmp_path_factory.mktemp("engines"), results, runs)
    return html_path


def _dump_dom(chromium: str, page: Path, width: int) -> str:
    with tempfile.TemporaryDirectory(prefix="schedkit-chromium-") as profile:
        done = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", f"--user-data-dir={profile}", f"--window-size={width},1600",
             "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _probe(chromium: str, report: Path, width: int) -> dict[str, Any]:
    page = report.with_name(f"probe-{width}.html")
    page.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = _dump_dom(chromium, page, width)
    start = dom.find('<pre id="probe">')
    assert start >= 0, "the layout probe did not run: " + dom[-500:]
    text = dom[start + len('<pre id="probe">') : dom.index("</pre>", start)]
    result: dict[str, Any] = json.loads(html_lib.unescape(text))
    return result


def test_wide_window_summary_first_two_columns_settings_folded(
    chromium_bin: str, report: Path
) -> None:
    p = _probe(chromium_bin, report, 1400)
    assert p["width"] == 1400
    assert p["sections"] == sorted(p["sections"]), p["sections"]
    assert p["sections"][0] < 300  # the summary opens the page
    assert p["firstVerdict"] == "worse" and p["worseBackground"] == "rgb(255, 235, 233)"
    assert p["alerts"] == 2  # overload (run) and starvation (comparison)
    assert p["armEngines"] is None  # the arms ran on the same engine: nothing to set apart
    assert set(p["badges"]) <= set(TONES) and "no meaningful difference" in p["badges"]
    figures = p["figures"]
    assert len(figures) == 10
    assert len({f["left"] for f in figures}) == 2  # two columns ...
    for left, right in zip(figures[::2], figures[1::2], strict=True):
        assert left["top"] == right["top"] and left["left"] < right["left"]  # ... side by side
    assert all(s["width"] > 500 and s["height"] > 240 for s in p["svgs"]), p["svgs"]
    assert p["settingsOpen"] is False and p["settingsShown"] is False
    assert p["settingsHeight"] < 80  # one line: the summary of what is folded
    assert p["resources"] == 0  # nothing fetched: no scripts, styles, fonts or images


@pytest.mark.parametrize("width", [1400, 700])
def test_what_the_arms_ran_differently_opens_the_page(
    chromium_bin: str, engine_report: Path, width: int
) -> None:
    p = _probe(chromium_bin, engine_report, width)
    ran = p["armEngines"]
    assert ran is not None and ran["top"] < 200 and ran["width"] <= width
    assert ran["top"] + ran["height"] <= p["sections"][0]  # above the summary
    assert p["sections"][0] < 450  # which still opens the first screen
    assert p["armEngineRows"] == [
        ["max_num_seqs", "256", "64"],
        ["gpu_memory_utilization", "0.9", "0.85"],
        ["num_blocks", "13179", "11908"],
    ]
    assert p["differsBackground"] == "rgb(221, 244, 255)"  # highlighted
    assert p["firstVerdict"] == "worse"


def test_narrow_window_one_column(chromium_bin: str, report: Path) -> None:
    p = _probe(chromium_bin, report, 700)
    assert p["width"] == 700
    figures = p["figures"]
    assert len({f["left"] for f in figures}) == 1
    tops = [f["top"] for f in figures]
    assert tops == sorted(tops) and len(set(tops)) == len(tops)
    assert all(s["width"] > 500 for s in p["svgs"])  # still filling the column
    assert p["sections"] == sorted(p["sections"])


def decode_png(data: bytes, max_rows: int) -> tuple[int, int, list[bytes]]:
    """``(width, height, first rows as RGB(A) bytes)`` of an 8-bit, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks, width, height, bpp = 8, [], 0, 0, 3
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
    raw, stride = zlib.decompress(b"".join(chunks)), width * bpp
    prev, rows = bytearray(stride), []
    for r in range(min(height, max_rows)):
        at = r * (stride + 1)
        filter_type, line = raw[at], bytearray(raw[at + 1 : at + 1 + stride])
        for i in range(stride) if filter_type else ():
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if filter_type == 1:
                line[i] = (line[i] + a) & 255
            elif filter_type == 2:
                line[i] = (line[i] + b) & 255
            elif filter_type == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            else:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def _colours(rows: list[bytes], bpp: int) -> set[bytes]:
    return {row[i : i + 3] for row in rows[::2] for i in range(0, len(row), bpp * 2)}


def test_screenshot_shows_the_regression_and_a_plot(chromium_bin: str, report: Path) -> None:
    png = report.with_name("report.png")
    env = {**os.environ, "CHROMIUM": chromium_bin}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(report), str(png), "--size", "1400x1300"],
        capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    width, height, rows = decode_png(png.read_bytes(), max_rows=1300)
    assert (width, height) == (1400, 1300)
    bpp = len(rows[0]) // width
    top, plots = _colours(rows[:700], bpp), _colours(rows[700:], bpp)
    assert len(top | plots) > 50  # a page, not a blank or one-colour image
    assert bytes.fromhex("ffebe9") in top  # the worse row's red, on the first screen
    assert bytes.fromhex("cf222e") in top  # its badge and the alert flags
    assert bytes.fromhex("1f77b4") in plots  # the baseline's line in the first plots
