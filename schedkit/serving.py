"""What the engine adapters' ``schedkit serve <engine>`` launchers share."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from types import FrameType


def run_server(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` until it exits and return its exit code, passing SIGTERM and
    SIGINT on to it (the engines' servers shut down cleanly on either)."""
    process = subprocess.Popen(list(command), env=dict(env))

    def forward(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
