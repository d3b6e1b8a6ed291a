"""Writes ``schedkit.json``, the Grafana dashboard of the ``schedkit_*`` series beside
vLLM's and SGLang's own (``python deploy/grafana/build.py``; the file is committed).

One row for the policies (decisions, hook latency, rejections by reason, policy errors,
hook calls over budget, preemption victims, evictions), one for each engine (TTFT,
running and waiting requests, KV usage, preemptions). ``$policy`` selects compositions;
the datasource is chosen at import (``DS_PROMETHEUS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RATE = "$__rate_interval"
POLICY = 'policy=~"$policy"'

# (title, unit, [(legend, expr)])
POLICIES: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Policy decisions / s, by hook",
        "ops",
        [
            (
                "{{policy}} {{hook}}",
                f"sum by (policy, hook) (rate(schedkit_policy_decisions_total{{{POLICY}}}[{RATE}]))",
            ),
        ],
    ),
    (
        "Hook latency p99, by hook",
        "s",
        [
            (
                "{{policy}} {{hook}}",
                "histogram_quantile(0.99, sum by (le, policy, hook)"
                f" (rate(schedkit_hook_latency_seconds_bucket{{{POLICY}}}[{RATE}])))",
            ),
        ],
    ),
    (
        "Rejections / s, by reason",
        "reqps",
        [
            (
                "{{policy}}: {{reason}}",
                f"sum by (policy, reason) (rate(schedkit_rejections_total{{{POLICY}}}[{RATE}]))",
            ),
        ],
    ),
    (
        "Policy errors / s (the engine default was used)",
        "ops",
        [
            (
                "{{policy}} {{hook}}",
                f"sum by (policy, hook) (rate(schedkit_policy_errors_total[{RATE}]))",
            ),
            (
                "over budget: {{policy}} {{hook}}",
                f"sum by (policy, hook) (rate(schedkit_hook_over_budget_total[{RATE}]))",
            ),
        ],
    ),
    (
        "Preemption victims / s",
        "ops",
        [
            (
                "chosen by {{policy}}",
                f"sum by (policy) (rate(schedkit_preemption_victims_total{{{POLICY}}}[{RATE}]))",
            ),
            (
                "named, not preemptable: {{policy}}",
                f"sum by (policy) (rate(schedkit_preemption_victims_skipped_total{{{POLICY}}}[{RATE}]))",
            ),
        ],
    ),
    (
        "Evictions / s by the policy (vLLM: blocks; SGLang: radix nodes)",
        "ops",
        [
            ("{{policy}}", f"sum by (policy) (rate(schedkit_evictions_total{{{POLICY}}}[{RATE}]))"),
        ],
    ),
]
VLLM: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "vLLM TTFT p50 / p90",
        "s",
        [
            (
                "p50",
                "histogram_quantile(0.5, sum by (le)"
                f" (rate(vllm:time_to_first_token_seconds_bucket[{RATE}])))",
            ),
            (
                "p90",
                "histogram_quantile(0.9, sum by (le)"
                f" (rate(vllm:time_to_first_token_seconds_bucket[{RATE}])))",
            ),
        ],
    ),
    (
        "vLLM requests running / waiting",
        "short",
        [
            ("running", "sum(vllm:num_requests_running)"),
            ("waiting", "sum(vllm:num_requests_waiting)"),
        ],
    ),
    (
        "vLLM KV cache usage and preemptions / s",
        "percentunit",
        [
            ("KV usage", "avg(vllm:kv_cache_usage_perc)"),
            ("preemptions / s", f"sum(rate(vllm:num_preemptions_total[{RATE}]))"),
        ],
    ),
]
SGLANG: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("SGLang TTFT p50 / p90", "s", [
        ("p50", "histogram_quantile(0.5, sum by (le)"
                f" (rate(sglang:time_to_first_token_seconds_bucket[{RATE}])))"),
        ("p90", "histogram_quantile(0.9, sum by (le)"
                f" (rate(sglang:time_to_first_token_seconds_bucket[{RATE}])))"),
    ]),
    ("SGLang requests running / queued", "short", [
        ("running", "sum(sglang:num_running_reqs)"),
        ("queued", "sum(sglang:num_queue_reqs)"),
    ]),
    ("SGLang KV token usage and retractions / s", "percentunit", [
        ("token usage", "avg(sglang:token_usage)"),
        ("retractions / s", f"sum(rate(sglang:num_retracted_requests_total[{RATE}]))"),
    ]),
]  # fmt: skip


def panel(pid: int, title: str, unit: str, queries: list[tuple[str, str]], x: int, y: int) -> Any:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (legend, expr) in enumerate(queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    panels: list[Any] = []
    y = 0
    for row, items in (("schedkit policies", POLICIES), ("vLLM", VLLM), ("SGLang", SGLANG)):
        panels.append({"id": len(panels) + 1, "type": "row", "title": row, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})  # fmt: skip
        y += 1
        for i, (title, unit, queries) in enumerate(items):
            panels.append(
                panel(len(panels) + 1, title, unit, queries, 8 * (i % 3), y + 8 * (i // 3))
            )
        y += 8 * ((len(items) + 2) // 3)
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "title": "schedkit",
        "uid": "schedkit",
        "tags": ["schedkit", "vllm", "sglang"],
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "policy",
                    "label": "policy",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
                    "query": "label_values(schedkit_policy_decisions_total, policy)",
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                }
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("schedkit.json")
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {out}")
