"""``schedkit policies`` at a standard 80-column terminal (#38 item 10): one line per
policy, its name whole and its summary cut to fit; ``--wide`` and ``--json`` the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from schedkit.cli.commands import POLICIES_WIDTH, policy_lines

HINT = "schedkit policies --wide: hooks, options and distributions; --json: all."
LONG_NAME = "a-policy-with-a-name-longer-than-the-name-column-of-the-listing"


def schedkit(*args: str, site: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = [str(site)] if site else []
    return subprocess.run(
        [sys.executable, "-m", "schedkit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "COLUMNS": "80",
            "TERM": "dumb",
            "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]),
        },
    )


def install(site: Path, module: str, entry_points: str, source: str) -> None:
    dist = site / f"schedkit_{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: schedkit-{module}\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[schedkit.policies]\n{entry_points}")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


def test_one_line_per_policy_within_80_columns() -> None:
    proc = schedkit("policies")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(schedkit("policies", "--json").stdout)
    *lines, hint = proc.stdout.splitlines()
    assert hint == HINT
    assert len(lines) == len(rows)
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    for line, row in zip(lines, rows, strict=True):
        name, summary = line.split(maxsplit=1)
        assert name == row["name"]
        shown = summary.removesuffix("…")
        assert row["summary"].replace("``", "").startswith(shown), (line, row["summary"])
        assert summary.endswith("…") or shown == row["summary"].replace("``", "")
    assert "select_victims" not in proc.stdout  # hooks are for --wide


def test_wide_is_the_table_of_hooks_options_and_distributions() -> None:
    proc = schedkit("policies", "--wide")
    assert proc.returncode == 0, proc.stderr
    assert "hooks" in proc.stdout and "distribution" in proc.stdout
    assert " waiting_key " in proc.stdout and " victim_key " in proc.stdout  # priority's
    assert HINT not in proc.stdout


def test_a_long_name_is_whole_and_a_broken_policy_is_listed(tmp_path: Path) -> None:
    docstring = "A summary far too long for one line: " + "word " * 30
    install(tmp_path, "longname", f"{LONG_NAME} = longname:Plugin\n", f'''
        import schedkit

        class Plugin(schedkit.Policy):
            """{docstring}

            Not part of the summary.
            """
    ''')  # fmt: skip
    install(tmp_path, "broken", "broken = broken:Plugin\n", "raise ImportError('missing dep')\n")
    proc = schedkit("policies", site=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert lines[LONG_NAME].startswith(f"{LONG_NAME}  A summary far")
    assert lines[LONG_NAME].endswith("…") and len(lines[LONG_NAME]) == 80
    assert lines["broken"].split(maxsplit=1)[1] == "(import failed)"
    assert "missing dep" in proc.stderr and "schedkit-broken" in proc.stderr
    rows = {
        row["name"]: row for row in json.loads(schedkit("policies", "--json", site=tmp_path).stdout)
    }
    assert rows[LONG_NAME]["summary"] == " ".join(docstring.split())


def test_the_lines_fit_the_width_and_cut_only_summaries() -> None:
    rows: list[dict[str, Any]] = [
        {"name": "fcfs", "summary": "First come, first served: the ``engine`` default."},
        {"name": "x" * 70, "summary": "y " * 40},
        {"name": "z" * 90, "summary": "cut away"},
        {"name": "broken", "error": "cannot import"},
        {"name": "plain"},
    ]
    lines = policy_lines(rows)
    assert POLICIES_WIDTH == 80
    assert lines[0] == f"{'fcfs':<24}  First come, first served: the engine default."
    assert lines[1].startswith("x" * 70 + "  y y") and lines[1].endswith("…")
    assert len(lines[1]) == 80
    assert lines[2].startswith("z" * 90)  # a name is never cut, whatever the width
    assert lines[3] == f"{'broken':<24}  (import failed)"
    assert lines[4] == f"{'plain':<24}  -"
    assert policy_lines(rows[:1], width=30) == ["fcfs  First come, first serve…"]
