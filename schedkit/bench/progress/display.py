"""How a command's progress reads: the items it tracks, the line saying how far it is
(items done, requests of the running runs, elapsed, ETA), and the display drawing it on
stderr: one line rich redraws on a terminal, plain lines elsewhere (the start, one per
item done or per tenth of them past ``PLAIN_ITEMS``, and at most one per ``PLAIN_EVERY_S``
in between).

A thread of the command's process reads the board (``reports``) every ``TICK_S`` and
draws. It holds a lock while it writes, which a fork waits for (``os.register_at_fork``),
so a worker is never forked in the middle of a write.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from schedkit.bench.progress.reports import Snapshot, snapshot

__all__ = ["Display", "Tracker", "clock", "eta", "fraction", "short_status", "status"]

TICK_S = 0.25  # how often the display thread reads the board
PLAIN_EVERY_S = 30.0  # off a terminal: at most this long between two lines while running
PLAIN_ITEMS = 20  # off a terminal: a line per item done up to this many, else per tenth

T = TypeVar("T")


@dataclass
class Tracker:
    """The items of a command (``total`` ``unit``, e.g. 3 arms) and which are done."""

    what: str
    total: int
    unit: str
    runs_word: str | None = None  # each item runs several of these (plan: "probes")
    fine: bool = True  # one run per item: a running run's share counts toward the item
    labels: list[str] = field(default_factory=list)
    done: int = 0
    started_at: int = 0  # done before this command (a resumed sweep's points)
    on_done: Callable[[], None] | None = None

    def item_done(self, label: str = "") -> None:
        self.done += 1
        if label:
            self.labels.append(label)
        if self.on_done is not None:
            self.on_done()

    def __call__(self, item: T) -> T:
        """``item`` is done (for comprehensions); returns it."""
        self.item_done()
        return item

    def summary(self) -> str:
        """How many items were done: ``3 of 8 candidates (a, b, c done)``, for a message."""
        done = f" ({', '.join(self.labels)} done)" if self.labels else ""
        if self.done == 0:
            text = f"before any of the {self.total} {self.unit} finished"
        else:
            text = f"after {self.done} of {self.total} {self.unit}{done}"
        return text


def fraction(tracker: Tracker, snap: Snapshot) -> float:
    """The share of this command's work done: its items, and (``fine``) the running
    runs' shares of theirs."""
    left = tracker.total - tracker.started_at
    if left <= 0:
        return 1.0
    done = tracker.done - tracker.started_at + (snap.fraction if tracker.fine else 0.0)
    return min(1.0, max(0.0, done / left))


def short_status(tracker: Tracker, snap: Snapshot, elapsed: float, share: float) -> str:
    """The terminal's line beside its bar: ``bench 1/3 arms · 12,345/40,000 requests ·
    0:12 · ETA 0:20``."""
    parts = [f"{tracker.what} {tracker.done:,}/{tracker.total:,} {tracker.unit}"]
    if tracker.runs_word is not None and snap.runs:
        parts.append(f"{snap.runs:,} {tracker.runs_word}")
    if snap.live and snap.total:
        parts.append(f"sent {snap.sent:,} · ended {snap.done:,}/{snap.total:,} requests")
    elif snap.total:
        parts.append(f"{snap.done:,}/{snap.total:,} requests")
    left = eta(elapsed, share)
    parts += [clock(elapsed), f"ETA {clock(left) if left else '-'}"]
    return " · ".join(parts)


def status(tracker: Tracker, snap: Snapshot, elapsed: float, share: float) -> str:
    """A plain line: items done, what is running, elapsed and ETA."""
    parts = [f"{tracker.what}: {tracker.done:,} of {tracker.total:,} {tracker.unit} done"]
    if tracker.labels and len(tracker.labels) <= PLAIN_ITEMS:
        parts[0] += f" ({', '.join(tracker.labels)})"
    if tracker.runs_word is not None and snap.runs:
        parts[0] += f", {snap.runs:,} {tracker.runs_word} run"
    if snap.live and snap.total:
        parts.append(f"sent {snap.sent:,}, ended {snap.done:,} of {snap.total:,} requests")
    elif snap.total:
        parts.append(f"running: {snap.done:,} of {snap.total:,} requests simulated")
    if tracker.done >= tracker.total:
        return " · ".join([*parts, f"in {clock(elapsed)}"])
    left = eta(elapsed, share)
    parts += [f"{share:.0%}", f"{clock(elapsed)} elapsed", f"ETA {clock(left) if left else '-'}"]
    return " · ".join(parts)


def eta(elapsed: float, share: float) -> float | None:
    """Seconds left at the pace so far; None before there is a pace to go by."""
    if share <= 0.005 or elapsed <= 0:
        return None
    return elapsed * (1.0 - share) / share


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


_draw_lock = threading.Lock()  # held while the display writes; a fork waits for it


def _after_fork_in_child() -> None:
    global _draw_lock
    _draw_lock = threading.Lock()  # the copy is held (the parent took it to fork)


os.register_at_fork(
    before=lambda: _draw_lock.acquire(),
    after_in_parent=lambda: _draw_lock.release(),
    after_in_child=_after_fork_in_child,
)


class Display:
    """Draws a tracker on ``stream``: one redrawn line on a terminal, plain lines
    elsewhere; a thread reads the board every ``TICK_S``."""

    def __init__(self, tracker: Tracker, stream: IO[str], intro: str) -> None:
        from rich.console import Console

        self.tracker, self.stream = tracker, stream
        self.console = Console(file=stream)
        self.terminal = self.console.is_terminal
        self.started = time.monotonic()
        self.last_line = self.started
        self.tenth = 0
        self.share = 0.0
        self._stop = threading.Event()
        self.bar: Any = None
        self.intro = intro
        self.thread = threading.Thread(target=self._run, name="schedkit-progress", daemon=True)

    def start(self) -> None:
        tracker = self.tracker
        if self.terminal:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
            from rich.table import Column

            line = Column(no_wrap=True, overflow="ellipsis")  # one line, whatever the width
            self.bar = Progress(
                BarColumn(bar_width=20), TaskProgressColumn(), TextColumn("{task.description}",
                table_column=line), console=self.console, transient=True, auto_refresh=False,
                redirect_stdout=False, redirect_stderr=False,
            )  # fmt: skip
            self.task = self.bar.add_task(tracker.what, total=1.0)
            self.bar.start()
        tracker.on_done = self._item_done
        self.thread.start()
        if not self.terminal:
            self._line(self.intro or f"{tracker.what}: {tracker.total:,} {tracker.unit}")

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            self.draw()

    def draw(self, *, line: bool = False) -> None:
        """Redraw (on a terminal); off one, write a line when ``line`` or when none was
        written for ``PLAIN_EVERY_S``."""
        snap = snapshot()
        self.share = max(self.share, fraction(self.tracker, snap))
        now = time.monotonic()
        if self.terminal:
            text = short_status(self.tracker, snap, now - self.started, self.share)
            with _draw_lock:
                self.bar.update(self.task, completed=self.share, description=text)
                self.bar.refresh()
        elif line or now - self.last_line >= PLAIN_EVERY_S:
            self._line(status(self.tracker, snap, now - self.started, self.share))

    def _line(self, text: str) -> None:
        with _draw_lock:
            self.stream.write(text + "\n")
            self.stream.flush()
        self.last_line = time.monotonic()

    def _item_done(self) -> None:
        tracker = self.tracker
        tenth = 10 * tracker.done // max(1, tracker.total)
        if tracker.total <= PLAIN_ITEMS or tenth > self.tenth or tracker.done == tracker.total:
            self.tenth = tenth
            self.draw(line=True)

    def stop(self) -> None:
        self._stop.set()
        if self.thread.ident is not None:
            self.thread.join()
        self.tracker.on_done = None
        if self.bar is not None:
            with _draw_lock:
                self.bar.stop()
