"""The top-level CLI at a standard 80-column terminal: --version, the bundled workloads,
help and tables that never cut a name, brackets printed as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from schedkit.cli.bench import DEPRECATED_FLAGS
from schedkit.workload import KNOWN_WORKLOADS, load_workload


def schedkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80", "TERM": "dumb"},
    )


def test_version() -> None:
    proc = schedkit("--version")
    assert proc.returncode == 0 and proc.stdout == f"schedkit {version('schedkit')}\n"


def test_workloads_lists_every_bundled_workload_with_its_shape() -> None:
    proc = schedkit("workloads", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert list(rows) == list(KNOWN_WORKLOADS)
    mooncake = load_workload("mooncake-conv").summary()
    requests = mooncake["requests"]
    assert isinstance(requests, int) and rows["mooncake-conv"]["requests"] == requests > 10_000
    assert rows["mooncake-conv"]["prompt_p50"] == mooncake["prompt_p50"]
    assert "Apache-2.0" in rows["mooncake-conv"]["source"]
    table = schedkit("workloads")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    by_name = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert list(by_name) == list(KNOWN_WORKLOADS)
    assert by_name["mooncake-conv"][1] == str(mooncake["requests"])
    assert by_name["mooncake-conv"][-1] == "shared" and by_name["azure-conv"][-1] == "-"


def test_help_keeps_option_names_whole_and_brackets_as_written() -> None:
    proc = schedkit("bench", "--help")
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    for name in ("--long-prefill-token-threshold", "--gpu-memory-utilization", "--record-steps"):
        assert f"  {name} " in proc.stdout or f"  {name}\n" in proc.stdout, name
    assert "[engine] table" in " ".join(proc.stdout.split())  # not eaten as markup
    assert "…" not in proc.stdout


def test_policies_table_never_cuts_a_name() -> None:
    proc = schedkit("policies", "--wide")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(schedkit("policies", "--json").stdout)
    for row in listed:
        assert f" {row['name']} " in proc.stdout, row["name"]
        for hook in row.get("hooks", []):
            assert f" {hook} " in proc.stdout, hook


def test_usage_errors_name_the_option_in_plain_text() -> None:
    proc = schedkit("bench", "--no-such-flag")
    assert proc.returncode == 2
    assert "No such option: --no-such-flag" in proc.stderr and "╭" not in proc.stderr


def test_vllm_flag_names_and_the_old_ones_with_a_deprecation_warning(tmp_path: Path) -> None:
    common = ("bench", "--workload", "poisson:rate=5,n=20", "--policy", "fcfs")
    new = schedkit(
        *common, "--num-gpu-blocks-override", "3000", "--no-enable-prefix-caching",
        "-tp", "2", "--out", str(tmp_path / "new"),
    )  # fmt: skip
    old = schedkit(
        *common, "--kv-blocks", "3000", "--no-prefix-caching", "--tp", "2",
        "--out", str(tmp_path / "old"),
    )  # fmt: skip
    assert new.returncode == 0 and old.returncode == 0, new.stderr + old.stderr
    assert "deprecated" not in new.stderr
    for before, after in DEPRECATED_FLAGS.items():
        assert f"warning: {before} is deprecated and will be removed; use vLLM's name, {after}" in (
            old.stderr
        )
    engines = [
        json.loads((tmp_path / name / "results.json").read_text())["engine"]
        for name in ("new", "old")
    ]
    assert engines[0] == engines[1]
    assert engines[0]["num_blocks"] == 3000 and engines[0]["tp"] == 2
    assert engines[0]["enable_prefix_caching"] is False
