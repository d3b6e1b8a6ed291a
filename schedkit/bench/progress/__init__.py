"""Progress of the long commands (bench arms, sweep points, plan candidates, live replays)
on stderr, and what an interrupted one says it kept.

A command's loop opens :func:`tracking` over its items (arms, probe points, candidates)
and marks each one done; nothing is shown unless the ``schedkit`` command turned the
display on (:func:`show_progress`), so library callers and tests see no output. Inside an
item, how far its run is comes from the run itself, at a coarse grain (``reports``: the
simulator once per simulated second, a live replay per request), through memory shared
with the worker processes; the display (``display``) reads it in a thread and draws, so
workers never touch the terminal.

Ctrl-C inside :func:`tracking` becomes :class:`Interrupted` (exit status 130), whose
one-line message says how many items were done and what was kept.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from schedkit.bench.progress import reports
from schedkit.bench.progress.display import Display, Tracker, clock, fraction, status
from schedkit.bench.progress.reports import (
    Board,
    LiveProgress,
    Snapshot,
    live_replay,
    per_replica,
    simulating,
    snapshot,
)
from schedkit.errors import SchedkitError

__all__ = [
    "INTERRUPTED_EXIT",
    "Board",
    "Interrupted",
    "LiveProgress",
    "Snapshot",
    "Tracker",
    "clock",
    "fraction",
    "live_replay",
    "per_replica",
    "show_progress",
    "simulating",
    "status",
    "tracking",
]

INTERRUPTED_EXIT = 130  # as a shell reports a command stopped by Ctrl-C


class Interrupted(SchedkitError):
    """Ctrl-C stopped a command; the message says what was done and what was kept."""

    exit_code = INTERRUPTED_EXIT


_shown = False


def show_progress(shown: bool = True) -> None:
    """Show the progress of commands from now on (the ``schedkit`` command does), on
    stderr."""
    global _shown
    _shown = shown


@contextmanager
def tracking(
    what: str,
    total: int,
    unit: str,
    *,
    runs: str | None = None,
    fine: bool = True,
    intro: str = "",
    kept: str | None = "nothing written",
    started_at: int = 0,
) -> Iterator[Tracker]:
    """Track a command of ``total`` items (``unit``: "arms", "candidates"); mark each done
    on the tracker yielded. Shown on stderr when the display is on and no other command
    is being shown. Ctrl-C becomes :class:`Interrupted`: ``interrupted after 2 of 3 arms
    (fcfs, sjf done); {kept}`` (``kept=None``: the KeyboardInterrupt goes on, for a caller
    that says what it kept). ``fine``: one run per item, so a running run's share counts;
    ``runs``: the word for an item's runs, counted when it has several (plan: "probes");
    ``started_at``: items done before (a resumed sweep)."""
    tracker = Tracker(what, total, unit, runs, fine, done=started_at, started_at=started_at)
    display = None
    if _shown and reports._board is None:
        reports._board = Board()
        display = Display(tracker, sys.stderr, intro)
    try:
        if display is not None:
            display.start()  # in the try: a Ctrl-C from now on is summarised
        yield tracker
    except KeyboardInterrupt:
        if kept is None:  # the caller says what it kept (a sweep: its probe points)
            raise
        runs_note = ""
        if runs is not None and display is not None:
            runs_note = f", {snapshot().runs:,} {runs} run"
        raise Interrupted(f"interrupted {tracker.summary()}{runs_note}; {kept}") from None
    finally:
        if display is not None:
            display.stop()
            reports._board = None
