"""What the engine adapters' ``schedkit serve <engine>`` launchers share."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType

from schedkit.errors import SchedkitError

__all__ = ["find_option", "metrics_dir", "option_value", "run_server"]


def find_option(
    args: Sequence[str], name: str, *, underscores: bool = False
) -> tuple[int, int, str] | None:
    """The last ``name VALUE`` or ``name=VALUE`` in ``args``: ``(start, stop, value)``,
    ``args[start:stop]`` being the option. With ``underscores`` ``--foo_bar`` counts as
    ``--foo-bar`` too (vLLM's parser accepts both)."""
    spellings = [name]
    if underscores and name.startswith("--"):
        spellings.append("--" + name[2:].replace("-", "_"))
    found = None
    for i, arg in enumerate(args):
        for spelling in spellings:
            if arg == spelling:
                if i + 1 >= len(args):
                    raise SchedkitError(f"{name} needs a value")
                found = (i, i + 2, args[i + 1])
            elif arg.startswith(spelling + "="):
                found = (i, i + 1, arg[len(spelling) + 1 :])
    return found


def option_value(args: Sequence[str], name: str, *, underscores: bool = False) -> str | None:
    """The value of the last ``name VALUE`` or ``name=VALUE`` in ``args`` (``find_option``)."""
    found = find_option(args, name, underscores=underscores)
    return None if found is None else found[2]


@contextmanager
def metrics_dir(prefix: str, wanted: bool = True) -> Iterator[str | None]:
    """A fresh temporary directory for the server's ``PROMETHEUS_MULTIPROC_DIR`` (named
    ``prefix...``), removed when the server is done; ``None`` when not ``wanted``."""
    if not wanted:
        yield None
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
