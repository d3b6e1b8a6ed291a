"""The Grafana dashboard and Prometheus rules in deploy/: built from their script, naming
only series schedkit exports, and the rules checked and unit-tested by Prometheus's own
promtool (installed by `make test`, deploy/prometheus/install-promtool.sh). The engines'
own series the dashboard names are checked against real scrapes in the adapters' suites
(test_server.py)."""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
from pathlib import Path

import pytest

from schedkit import prometheus

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "schedkit.json"
RULES = DEPLOY / "prometheus" / "schedkit-rules.yml"
METRIC = re.compile(r"\b((?:schedkit_|vllm:|sglang:)[a-z_:]+)")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "")


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def exported() -> set[str]:
    """The series names schedkit's metric families produce."""
    return {name + suffix for name in prometheus.NAMES.values() for suffix in SUFFIXES}


def test_the_dashboard_is_what_its_script_builds() -> None:
    built = runpy.run_path(str(DEPLOY / "grafana" / "build.py"))["dashboard"]()
    assert json.loads(DASHBOARD.read_text()) == built, "run python deploy/grafana/build.py"


def test_every_schedkit_series_named_is_exported() -> None:
    names = exported()
    used = {m for expr in dashboard_exprs() for m in METRIC.findall(expr)}
    used |= set(METRIC.findall(RULES.read_text()))
    ours = {m for m in used if m.startswith("schedkit_")}
    assert ours and ours <= names, sorted(ours - names)
    panel = {m for expr in dashboard_exprs() for m in METRIC.findall(expr)}
    unshown = [n for n in prometheus.NAMES.values() if not any(m.startswith(n) for m in panel)]
    assert not unshown, f"no panel shows {unshown}"
    assert {"vllm:num_requests_waiting", "sglang:num_queue_reqs"} <= used  # the engines' rows


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is not installed: run deploy/prometheus/install-promtool.sh (make test"
            " does), as root: apt-get install -y prometheus"
        )
    return found


def test_the_rules_pass_promtools_check_and_unit_tests() -> None:
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 8 rules found" in check.stdout, check.stderr
    test = subprocess.run(
        [tool, "test", "rules", "schedkit-rules.test.yml"],
        cwd=RULES.parent, capture_output=True, text=True,
    )  # fmt: skip
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def test_promtool_catches_a_wrong_rule(tmp_path: Path) -> None:
    """The unit test can fail: a rule summing without its policy label breaks it."""
    tool = promtool()
    (tmp_path / "schedkit-rules.yml").write_text(
        RULES.read_text().replace(
            "sum by (policy, hook) (rate(schedkit_policy_decisions_total[1m]))",
            "sum by (hook) (rate(schedkit_policy_decisions_total[1m]))",
        )
    )
    shutil.copy(RULES.with_name("schedkit-rules.test.yml"), tmp_path)
    test = subprocess.run(
        [tool, "test", "rules", "schedkit-rules.test.yml"], cwd=tmp_path, capture_output=True,
        text=True,
    )  # fmt: skip
    assert test.returncode != 0 and "FAILED" in test.stdout + test.stderr


def test_every_panel_has_a_query_and_unit() -> None:
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    assert len(panels) == 12
    for p in panels:
        assert p["targets"] and p["fieldConfig"]["defaults"]["unit"], p["title"]
        assert all(t["expr"] and t["legendFormat"] for t in p["targets"]), p["title"]
