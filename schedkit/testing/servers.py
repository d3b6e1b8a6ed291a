"""For tests that start real servers (the engines' prefill/decode pair tests): start one
in its own session with its output in a log, wait until a set of them answers
``/health`` (failing with the log's tail of the one that died or is slow), the memory
free for them, and one Prometheus series from a ``/metrics`` page."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

__all__ = ["available_gib", "log_tail", "prometheus_sample", "start_logged", "wait_healthy"]

Started = tuple[subprocess.Popen[bytes], str, Path]  # the process, its base URL, its log


def available_gib() -> float:
    """The memory the kernel says is available (``MemAvailable``), in GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


def log_tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:]


def start_logged(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own (kill its process group to end it all), its
    output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def wait_healthy(started: Mapping[str, Started], startup_s: float, expected: str) -> None:
    """Until every server of ``started`` (name -> process, base URL, log) answers
    ``/health``; fails the test naming the one that exits, or is not up within
    ``startup_s`` (``expected``: how long they take on an idle machine), with its log."""
    import pytest

    deadline = time.monotonic() + startup_s
    waiting = dict(started)
    while waiting:
        for name, (process, base, log) in list(waiting.items()):
            if process.poll() is not None:
                pytest.fail(f"{name} server exited with {process.returncode}:\n{log_tail(log)}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                    if response.status == 200:
                        del waiting[name]
            except (urllib.error.URLError, OSError):
                pass
        if waiting and time.monotonic() > deadline:
            name = next(iter(waiting))
            pytest.fail(
                f"{name} server not up after {startup_s:.0f} s ({expected}; this one is"
                f" slower or busy):\n{log_tail(waiting[name][2])}"
            )
        time.sleep(1)


def prometheus_sample(page: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples on a Prometheus text ``page`` whose labels include
    ``labels`` (0 when none)."""
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", page, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total
