"""Draw evict-hit-rate.svg: prefix hit rate against KV cache size, one line per policy.

python benchmarks/policies/evict_figure.py /tmp/sk/f-evict-{8000,12000,30000}/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from schedkit.bench.report.svg import line_chart

STYLE = (
    ".plot{background:#fff;font-family:system-ui,sans-serif}"
    " .plot .title{font-size:14px;font-weight:600} .plot .legend{font-size:12px}"
    " .plot .tick{font-size:11px;fill:#555} .mid{text-anchor:middle} .end{text-anchor:end}"
    " .plot .axis{font-size:12px;text-anchor:middle;fill:#333} .plot .grid{stroke:#eee}"
    " .plot .frame{fill:none;stroke:#999} .plot .line{fill:none;stroke-width:1.8}"
)


def main(paths: list[str]) -> None:
    series: dict[str, list[tuple[float, float]]] = {}
    for path in paths:
        results = json.loads(Path(path).read_text())
        blocks = float(results["engine"]["num_blocks"])
        for arm in results["arms"]:
            name = "LRU (fcfs)" if arm["policy"] == "fcfs" else arm["policy"]
            series.setdefault(name, []).append((blocks, 100 * arm["metrics"]["prefix_hit_rate"]))
    svg = line_chart(
        [(name, sorted(points)) for name, points in series.items()],
        title="mooncake-conv, 1,500 requests: prefix hit rate",
        x_label="KV cache (blocks of 16 tokens)",
        y_label="prefix hit rate (%)",
        y_max=5.0,
    )
    svg = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    svg = svg.replace(">", f"><style>{STYLE}</style>", 1)
    out = Path(__file__).with_name("evict-hit-rate.svg")
    out.write_text(svg + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
