"""Render ``schedkit.json`` from a real Prometheus, as Grafana lays it out: each panel's
queries evaluated by Prometheus (``/api/v1/query_range``), drawn as line charts on
Grafana's grid (``gridPos``: 24 columns, 30 px a row unit), in one self-contained HTML
page; headless Chromium turns it into a picture (``docs/dashboard.png``). Not Grafana's
own renderer (no Grafana installs on this project's machines): its queries, variables and
layout, with schedkit's report charts.

    python deploy/grafana/render.py --prometheus http://127.0.0.1:9090 --minutes 5 \\
        --out dashboard.html [--png docs/dashboard.png]

``$policy`` is "All" (``.*``), ``$__rate_interval`` is Grafana's rule for it: four scrape
intervals, or the step plus one when that is longer.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedkit.bench.report.svg import line_chart

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "schedkit.json"
SCREENSHOT = HERE.parents[1] / "benchmarks" / "report" / "screenshot.py"
ROW_PX = 30  # Grafana's height of one gridPos unit
UNITS = {"ops": "per second", "reqps": "requests / s", "s": "seconds", "short": "count",
         "percentunit": "fraction"}  # fmt: skip


@dataclass
class Panel:
    title: str
    kind: str  # "row" or "timeseries"
    grid: dict[str, int]
    unit: str = ""
    series: list[tuple[str, list[tuple[float, float]]]] = field(default_factory=list)


def expand(expr: str, rate_interval: str, policy: str = ".*") -> str:
    """A panel's query with the dashboard's variables filled in."""
    return expr.replace("$__rate_interval", rate_interval).replace("$policy", policy)


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` replaced by the series' label value."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def short_names(names: list[str]) -> tuple[str, list[str]]:
    """The words every legend name of a panel starts with, and the names without them (a
    policy composition's name would fill the legend's width, hiding the hooks)."""
    if len(names) < 2:
        return "", names
    common = names[0]
    for name in names[1:]:
        while not name.startswith(common):
            common = common[:-1]
    common = common[: common.rfind(" ") + 1]  # whole words only
    if not common or any(len(n) == len(common) for n in names):
        return "", names
    return common.strip(), [n[len(common) :] for n in names]


def query_range(
    prometheus: str, expr: str, start: float, end: float, step: float
) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Prometheus's answer to ``expr`` over ``start..end``: (labels, [(t, value)]) per series,
    NaN points left out (what Grafana leaves as gaps)."""
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{query}", timeout=30) as resp:
        answer = json.load(resp)
    if answer.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {answer.get('error')}")
    out = []
    for result in answer["data"]["result"]:
        points = [(float(t), float(v)) for t, v in result["values"]]
        points = [(t, v) for t, v in points if math.isfinite(v)]
        if points:
            out.append((result["metric"], points))
    return out


def evaluate(
    dashboard: dict[str, Any], prometheus: str, start: float, end: float, step: float,
    scrape_s: float,
) -> list[Panel]:  # fmt: skip
    """Every panel with the series its queries return (x: seconds from ``start``)."""
    interval = f"{max(4 * scrape_s, step + scrape_s):g}s"
    panels = []
    for raw in dashboard["panels"]:
        unit = raw.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        panel = Panel(raw.get("title", ""), raw["type"], raw["gridPos"], unit)
        for target in raw.get("targets", []):
            for labels, points in query_range(
                prometheus, expand(target["expr"], interval), start, end, step
            ):
                name = legend(target.get("legendFormat", ""), labels) or target["expr"]
                panel.series.append((name, [(t - start, v) for t, v in points]))
        panels.append(panel)
    return panels


def page(title: str, panels: list[Panel]) -> str:
    """The dashboard as one HTML page: Grafana's grid, a chart per panel."""
    cells = []
    for p in panels:
        g = p.grid
        place = f"grid-column:{g['x'] + 1}/span {g['w']};grid-row:{g['y'] + 1}/span {g['h']}"
        if p.kind == "row":
            cells.append(f'<h2 style="{place}">{html.escape(p.title)}</h2>')
            continue
        common, names = short_names([name for name, _ in p.series])
        series = [(n, pts) for n, (_, pts) in zip(names, p.series, strict=True)]
        chart = line_chart(
            series, title=f"{p.title} ({common})" if common else p.title, x_label="seconds",
            y_label=UNITS.get(p.unit, p.unit), y_min=0.0, empty="No data",
        )  # fmt: skip
        cells.append(f'<figure class="panel" style="{place}">{chart}</figure>')
    style = (
        "body{margin:0;padding:12px;background:#111217;color:#ccccdc;font:13px sans-serif}"
        f"main{{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:{ROW_PX}px;"
        "gap:8px}h1{font-size:18px;margin:4px 0 12px}h2{font-size:15px;margin:0;"
        "align-self:end}figure.panel{margin:0;background:#181b1f;border:1px solid #2c3235;"
        "border-radius:2px;padding:6px;overflow:hidden}figure.panel svg{width:100%;"
        "height:100%}.plot text{fill:#ccccdc}.plot .title{font-size:14px;font-weight:600}"
        ".plot .legend{font-size:12px}.plot .tick{font-size:11px;fill:#9fa7b3}"
        ".mid{text-anchor:middle}.end{text-anchor:end}.plot .axis{font-size:12px;"
        "text-anchor:middle}.plot .grid{stroke:#2c3235}.plot .frame{fill:none;stroke:#555}"
        ".plot .line{fill:none;stroke-width:1.8}.plot .whisker{stroke-width:1.2}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<main>{''.join(cells)}</main></body></html>"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="base URL, http://host:port")
    parser.add_argument("--minutes", type=float, default=5.0, help="the last N minutes")
    parser.add_argument("--step", type=float, default=1.0, help="seconds between points")
    parser.add_argument("--scrape-s", type=float, default=1.0, help="Prometheus's scrape interval")
    parser.add_argument("--out", type=Path, required=True, help="the HTML page to write")
    parser.add_argument("--png", type=Path, help="also a picture of it (headless Chromium)")
    args = parser.parse_args(argv)
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    panels = evaluate(
        dashboard, args.prometheus.rstrip("/"), end - 60 * args.minutes, end, args.step,
        args.scrape_s,
    )  # fmt: skip
    args.out.write_text(page(dashboard["title"], panels))
    if args.png:
        height = ROW_PX * max(p.grid["y"] + p.grid["h"] for p in panels) + 300
        subprocess.run(
            [sys.executable, str(SCREENSHOT), str(args.out), str(args.png), "--size",
             f"1600x{height}"],
            check=True,
        )  # fmt: skip
    empty = [p.title for p in panels if p.kind != "row" and not p.series]
    print(f"wrote {args.out}; panels without data: {', '.join(empty) or 'none'}")


if __name__ == "__main__":
    main()
