"""``--serve-command``: one live target, a fresh server per arm.

With ``--engine openai``, one ``--target URL`` and ``--serve-command CMD``, each arm starts
``CMD`` with ``{policy}`` replaced by the arm's policy (``schedkit serve vllm --policy
{policy} -- --model M --port 8001``, say), waits until ``URL/v1/models`` answers, replays
the workload against it, and stops it (SIGTERM to its process group, SIGKILL after
``STOP_GRACE_S``): the arms run one after the other on the same GPUs, each against a
server started with its own policy. The server's output goes to
``server-<arm index>-<policy>.log`` in the bench's output directory.

A server that exits before it answers, or does not answer within
``--server-start-timeout-s``, stops the bench with its exit status and the last lines of
its log; so does a URL that already answers before the arm's server starts (another
server is in the way, and the arm would measure it instead).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from schedkit.errors import SchedkitError

__all__ = ["POLICY_FIELD", "STOP_GRACE_S", "arm_command", "launched"]

POLICY_FIELD = "{policy}"
STOP_GRACE_S = 30.0
POLL_S = 0.5
LOG_TAIL = 20  # lines of the server's log quoted when it fails


def arm_command(template: str, policy: str) -> list[str]:
    """The command line for the arm running ``policy``."""
    return [part.replace(POLICY_FIELD, policy) for part in shlex.split(template)]


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether a server answers ``GET url/v1/models`` with a 2xx now."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/v1/models", timeout=timeout_s) as reply:
            return 200 <= int(reply.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL:])


def log_name(index: int, policy: str) -> str:
    return f"server-{index}-{re.sub(r'[^A-Za-z0-9_.+-]', '_', policy)}.log"


@contextmanager
def launched(command: list[str], url: str, timeout_s: float, log: Path) -> Iterator[None]:
    """Run ``command`` as the server behind ``url`` for the ``with`` block."""
    if answers(url):
        raise SchedkitError(
            f"something already answers at {url} before the arm's server starts; stop it, or"
            " drop --serve-command and give one --target per running server"
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        try:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as exc:
            raise SchedkitError(
                f"--serve-command: cannot run {shlex.join(command)}: {exc.strerror or exc}"
            ) from None
        try:
            _wait_ready(process, command, url, timeout_s, log)
            yield
        finally:
            _stop(process)


def _wait_ready(
    process: subprocess.Popen[bytes], command: list[str], url: str, timeout_s: float, log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    while not answers(url):
        code = process.poll()
        if code is not None:
            raise SchedkitError(
                f"--serve-command: {shlex.join(command)} exited with status {code} before"
                f" {url} answered; the end of its log ({log}):\n{_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise SchedkitError(
                f"--serve-command: {url} did not answer within {timeout_s:g} s of starting"
                f" {shlex.join(command)} (--server-start-timeout-s); the end of its log"
                f" ({log}):\n{_tail(log)}"
            )
        time.sleep(POLL_S)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass
