"""plan.html and sweep.html in a real browser, as test_report_browser.py checks report.html.

Headless Chromium lays each page out at 700 and 1400 px, and a layout probe (a script
added to a copy of the page) measures what a reader sees: the answer (the chosen
deployment, each arm's knee) on the first screen, nothing wider than the window, no text
cut off in its box, the charts at a readable size with their target lines and markers,
and nothing fetched. Chromium is required, as for the report's test.
"""

from __future__ import annotations

import html as html_lib
import json
from pathlib import Path
from typing import Any

import pytest
from test_report_browser import _dump_dom, chromium_bin  # noqa: F401 - chromium_bin: a fixture

from schedkit.bench.arms import EngineSettings, parse_arm
from schedkit.bench.plan import PlanSpec, run_plan
from schedkit.bench.plan_report import render_plan_html
from schedkit.bench.runner import BenchSpec
from schedkit.bench.sweep.run import run_sweep
from schedkit.bench.sweep.spec import SweepSpec

FIRST_SCREEN = 900  # px: what a laptop shows before any scrolling

PROBE = """<script>(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: Math.round(r.left), top: Math.round(r.top + scrollY),
            width: Math.round(r.width), height: Math.round(r.height),
            bottom: Math.round(r.bottom + scrollY), right: Math.round(r.right)}; };
  const q = (s) => document.querySelector(s), all = (s) => [...document.querySelectorAll(s)];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + " " + (el.innerText || el.textContent || "").trim().slice(0, 40);
  // every box outside the window, or text wider than its box (cut off or spilling)
  const wide = all("body *").filter((el) => !el.closest("svg") || el.tagName === "svg")
    .filter((el) => { const r = el.getBoundingClientRect();
      return r.width > 0 && (r.right > innerWidth + 0.5 || r.left < -0.5); }).map(name);
  const clipped = all("h1, h2, h3, p, li, th, td, figcaption, code")
    .filter((el) => el.scrollWidth > el.clientWidth + 1).map(name);
  const out = {
    width: innerWidth,
    pageWidth: document.documentElement.scrollWidth,
    wide, clipped,
    sections: all("body > section").map((s) => [s.id, box(s).top]),
    answer: box(q("#answer")),
    headline: q("#answer .headline") ? q("#answer .headline").innerText : null,
    chosen: q("#candidates tr.chosen") ? box(q("#candidates tr.chosen")) : null,
    chosenCells: q("#candidates tr.chosen")
      ? [...q("#candidates tr.chosen").cells].map((td) => td.innerText) : null,
    chosenRows: all("tr.chosen").length,
    knees: all("#knees tbody tr").map((tr) => ({box: box(tr),
      cells: [...tr.cells].map((td) => td.innerText)})),
    headers: all("thead th").map((th) => th.innerText.trim()),
    figures: all("figure").map(box),
    svgs: all("svg.plot").map(box),
    levels: all("svg .level").length,
    marks: all("svg .mark").map((m) => box(m)),
    references: all("svg .ref-label").map((t) => t.textContent),
    resources: performance.getEntriesByType("resource").length,
  };
  const pre = document.createElement("pre");
  pre.id = "probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();</script>"""


def _probe(chromium: str, page: Path, width: int) -> dict[str, Any]:
    copy = page.with_name(f"probe-{page.stem}-{width}.html")
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _dump_dom(chromium, copy, width)
    start = dom.find('<pre id="probe">')
    assert start >= 0, "the layout probe did not run: " + dom[-500:]
    text = dom[start + len('<pre id="probe">') : dom.index("</pre>", start)]
    result: dict[str, Any] = json.loads(html_lib.unescape(text))
    return result


@pytest.fixture(scope="module")
def plan_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four priced candidates, two with long engine settings, one ranked past the others."""
    bench = BenchSpec(
        workload="poisson:rate=40,n=300,prompt=1024,output=64", policies=["fcfs"],
        slo_ttft_ms=300.0, jobs=1,
    )  # fmt: skip
    long = EngineSettings(max_num_seqs=128, max_num_batched_tokens=4096, block_size=32)
    spec = PlanSpec(
        bench=bench, gpus=["H100-SXM", "A100-80GB"], settings=[EngineSettings(), long],
        prices={"H100-SXM": 3.0, "A100-80GB": 2.0}, max_replicas=16,
    )  # fmt: skip
    result = run_plan(spec)
    page = tmp_path_factory.mktemp("plan") / "plan.html"
    page.write_text(render_plan_html(result))
    return page


@pytest.fixture(scope="module")
def sweep_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two arms (one with a long name), three seeded replicates, five rates, a TTFT SLO."""
    bench = BenchSpec(
        workload="poisson:rate=10,n=200,prompt=600,output=60", policies=["fcfs"],
        arms=[parse_arm("name=two-sequences-at-a-time,max_num_seqs=2")], slo_ttft_ms=1000.0,
        jobs=1,
    )  # fmt: skip
    spec = SweepSpec(
        bench=bench, rate_scales=[0.5, 1.0, 2.0, 4.0, 8.0], replicates=3, arrivals="poisson"
    )
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(spec, out)
    return out / "sweep.html"


def _readable(p: dict[str, Any], width: int) -> None:
    """Nothing wider than the window, no text cut off, every header named, charts big
    enough to read, nothing fetched."""
    assert p["width"] == width
    assert p["pageWidth"] <= width, p["wide"]
    assert p["wide"] == [] and p["clipped"] == [], (p["wide"], p["clipped"])
    assert all(p["headers"]), p["headers"]  # no unnamed column
    assert all(s["width"] > 500 and s["height"] > 230 for s in p["svgs"]), p["svgs"]
    tops = [top for _, top in p["sections"]]
    assert tops == sorted(tops) and p["sections"][0][0] == "answer"
    assert p["resources"] == 0


@pytest.mark.parametrize("width", [1400, 700])
def test_plan_page_opens_with_the_chosen_deployment(
    chromium_bin: str,  # noqa: F811 - the fixture imported above
    plan_page: Path,
    width: int,
) -> None:
    p = _probe(chromium_bin, plan_page, width)
    _readable(p, width)
    long = "H100-SXM tp=1 [max_num_seqs=128, max_num_batched_tokens=4096, block_size=32]"
    assert p["headline"].startswith(f"Chosen: {long} x 2 replicas = 2 GPUs, $6.00/h.")
    assert p["chosenRows"] == 1 and p["chosenCells"][-1] == "chosen"
    assert p["chosen"]["bottom"] <= FIRST_SCREEN  # the answer, on the first screen
    assert p["answer"]["top"] < 250
    assert p["levels"] == 1 and len(p["marks"]) == 1  # the target line, the chosen ringed
    assert "$/h" in p["headers"]


@pytest.mark.parametrize("width", [1400, 700])
def test_sweep_page_opens_with_each_arms_knee(
    chromium_bin: str,  # noqa: F811 - the fixture imported above
    sweep_page: Path,
    width: int,
) -> None:
    p = _probe(chromium_bin, sweep_page, width)
    _readable(p, width)
    knees = p["knees"]
    assert [k["cells"][0] for k in knees] == ["fcfs", "two-sequences-at-a-time"]
    assert all(k["box"]["bottom"] <= FIRST_SCREEN for k in knees)
    for knee in knees:  # one figure with its interval, or a bound said in words
        assert knee["cells"][1].count("req/s") == 1, knee["cells"]
    assert p["answer"]["top"] < 250
    assert any(r.startswith("knee two-sequences") for r in p["references"]), p["references"]
    assert p["levels"] == 2  # the TTFT SLO, the attainment target
    figures = p["figures"]
    columns = len({f["left"] for f in figures})
    assert columns == (2 if width == 1400 else 1)


@pytest.fixture(scope="module")
def disagg_plan_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Aggregated and disaggregated candidates, every one sized (--no-prune)."""
    bench = BenchSpec(
        workload="poisson:rate=12,n=240,prompt=3000,output=100", policies=["least-loaded"],
        slo_ttft_ms=600.0, slo_tpot_ms=60.0, jobs=1,
    )  # fmt: skip
    spec = PlanSpec(
        bench=bench, gpus=["H100-SXM"], tps=[1, 2], prices={"H100-SXM": 3.0}, disagg=True,
        prune=False, max_replicas=16,
    )  # fmt: skip
    page = tmp_path_factory.mktemp("plan-disagg") / "plan.html"
    page.write_text(render_plan_html(run_plan(spec)))
    return page


@pytest.mark.parametrize("width", [1400, 700])
def test_a_disaggregated_plan_page_is_readable(
    chromium_bin: str,  # noqa: F811 - the fixture imported above
    disagg_plan_page: Path,
    width: int,
) -> None:
    p = _probe(chromium_bin, disagg_plan_page, width)
    _readable(p, width)
    assert "req/s per GPU" in p["headers"]
    assert p["chosenRows"] == 1 and p["chosen"]["bottom"] <= FIRST_SCREEN
