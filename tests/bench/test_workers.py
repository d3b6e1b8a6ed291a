"""A policy's exit-time code runs once per arm whether the arms run in schedkit's own
process (``--jobs 1``) or in forked workers (``schedkit.bench.workers``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from test_bench_cli import install_fake_plugin, schedkit

# Registers its exit-time code during the run, not when the bench checks the selection:
# an atexit handler and a weakref.finalize, each writing the steps its arm saw and its
# process. What the module registers on import (in schedkit's process, before any fork)
# is the parent's: it must run there, once.
EXIT_PROBE = """
import atexit
import json
import os
import weakref

from schedkit import Policy, hookimpl

LOG = os.environ["EXIT_PROBE_LOG"]
KEEP = []  # what a policy flushes at exit stays alive until then


def write(what, steps):
    with open(LOG, "a") as log:
        log.write(json.dumps([what, steps, os.getpid()]) + "\\n")


KEEP.append(type("Stats", (), {})())
atexit.register(write, "module atexit", 0)
weakref.finalize(KEEP[-1], write, "module finalize", 0)


class Plugin(Policy):
    def __init__(self, options=None):
        super().__init__(options)
        self.steps = 0

    @hookimpl
    def on_step_finished(self, report, engine):
        self.steps += 1
        if self.steps == 1:
            atexit.register(lambda: write("atexit", self.steps))
            KEEP.append(type("Stats", (), {})())
            weakref.finalize(KEEP[-1], lambda: write("finalize", self.steps))
"""

Record = tuple[str, int, int]  # what ran, the steps its arm saw, the process it ran in


def _bench(tmp_path: Path, jobs: int) -> list[Record]:
    log = tmp_path / f"exit-{jobs}.jsonl"
    env = install_fake_plugin(tmp_path / f"site-{jobs}", "exit-probe", "exit_probe", EXIT_PROBE)
    env["EXIT_PROBE_LOG"] = str(log)
    proc = schedkit(
        "bench", "--workload", "poisson:rate=20,n=60,prompt=200,output=20",
        "--policy", "exit-probe", "--policy", "fcfs+exit-probe", "--jobs", str(jobs),
        "--out", str(tmp_path / f"out-{jobs}"), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return [(str(w), int(s), int(p)) for w, s, p in map(json.loads, log.read_text().splitlines())]


def test_exit_time_code_runs_once_per_arm_with_or_without_workers(tmp_path: Path) -> None:
    one, two = _bench(tmp_path, 1), _bench(tmp_path, 2)
    for records in (one, two):
        ran = Counter(what for what, _, _ in records)
        assert ran == {"atexit": 2, "finalize": 2, "module atexit": 1, "module finalize": 1}
        steps = sorted(s for what, s, _ in records if what == "atexit")
        assert steps == sorted(s for what, s, _ in records if what == "finalize")
        assert min(steps) > 1  # run at the end of the arm, not when registered
    assert sorted(r[:2] for r in one) == sorted(r[:2] for r in two)
    (parent,) = {pid for what, _, pid in two if what.startswith("module")}
    assert parent not in {pid for what, _, pid in two if not what.startswith("module")}
