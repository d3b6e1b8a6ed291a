"""Progress of the long commands (bench arms, sweep points, plan candidates, live replays)
on stderr, and what an interrupted one says it kept.

A command's loop opens :func:`tracking` over its items (arms, probe points, candidates)
and marks each one done; nothing is shown unless the ``schedkit`` command turned the
display on (:func:`show_progress`), so library callers and tests see no output. On a
terminal the display is one line rich redraws (what is done, what is running, elapsed,
ETA); elsewhere (a CI log, a pipe) it is plain lines: one when the command starts, one
per item done (or per tenth of them, past 20 items) and, in between, one every
``PLAIN_EVERY_S`` at most.

Inside an item, how far its run is comes from the run itself, at a coarse grain: the
simulator reports once per sampled second of simulated time (``Recorder.on_sample``; no
call at all per step, and none when nothing is shown), a live replay per request sent and
ended. Those reports are a few numbers written into memory shared with the worker
processes forked after the display started (:class:`Board`); a thread of the parent
process reads them and draws, so workers never touch the terminal. That thread holds a
lock while it writes, which a fork waits for (``os.register_at_fork``), so a worker is
never forked in the middle of a write.

Ctrl-C inside :func:`tracking` becomes :class:`Interrupted` (exit status 130), whose
one-line message says how many items were done and what was kept.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawArray
from typing import IO, Any, TypeVar

from schedkit.errors import SchedkitError

__all__ = [
    "INTERRUPTED_EXIT",
    "Interrupted",
    "LiveProgress",
    "Tracker",
    "live_replay",
    "per_replica",
    "show_progress",
    "simulating",
    "tracking",
]

INTERRUPTED_EXIT = 130  # as a shell reports a command stopped by Ctrl-C
TICK_S = 0.25  # how often the display thread reads the board
PLAIN_EVERY_S = 30.0  # off a terminal: at most this long between two lines while running
PLAIN_ITEMS = 20  # off a terminal: a line per item done up to this many, else per tenth
SLOTS = 256  # processes that report at once (one more shares the last slot)
_DONE, _TOTAL, _SENT, _RUNS = range(4)  # a slot: requests done, of total, sent; runs ended

T = TypeVar("T")


class Interrupted(SchedkitError):
    """Ctrl-C stopped a command; the message says what was done and what was kept."""

    exit_code = INTERRUPTED_EXIT


# -- the board: how far each process's current run is --------------------------------


class Board:
    """Numbers the processes of one command write and its display thread reads: per
    process (a slot, claimed when it first reports), the requests its current run has done
    of its total, those sent (a live replay; -1 otherwise) and how many runs it ended. The
    memory is shared with processes forked after the board was made."""

    def __init__(self) -> None:
        self.values: Any = RawArray("d", SLOTS * 4)
        fork = "fork" in mp.get_all_start_methods()
        self._claimed: Any = mp.get_context("fork" if fork else None).Value("i", 0)
        self._slot = (-1, 0)  # (pid, slot) of this process

    def slot(self) -> int:
        """This process's slot (the first report claims it)."""
        pid = os.getpid()
        if self._slot[0] != pid:
            with self._claimed.get_lock():
                index = self._claimed.value
                self._claimed.value = index + 1
            self._slot = (pid, min(index, SLOTS - 1) * 4)
        return self._slot[1]

    def running(self, slot: int, done: float, total: float, sent: float = -1.0) -> None:
        values = self.values
        values[slot + _DONE], values[slot + _TOTAL], values[slot + _SENT] = done, total, sent

    def ended(self, slot: int) -> None:
        """The slot's run ended: nothing running there, one more run."""
        self.running(slot, 0.0, 0.0)
        self.values[slot + _RUNS] += 1

    def read(self) -> Snapshot:
        values = list(self.values)
        snapshot = Snapshot()
        for i in range(0, min(self._claimed.value, SLOTS) * 4, 4):
            done, total, sent, runs = values[i : i + 4]
            snapshot.runs += int(runs)
            if total > 0:
                snapshot.running += 1
                snapshot.done += int(done)
                snapshot.total += int(total)
                snapshot.fraction += min(1.0, max(0.0, done / total))
                snapshot.sent += int(sent) if sent >= 0 else 0
                snapshot.live = snapshot.live or sent >= 0
        return snapshot


@dataclass
class Snapshot:
    """The board summed over processes: runs going on and their requests, runs ended."""

    running: int = 0
    done: int = 0
    total: int = 0
    sent: int = 0
    live: bool = False
    fraction: float = 0.0  # the running runs' fractions done, summed
    runs: int = 0


_board: Board | None = None  # while a display runs: inherited by the workers it forks


@contextmanager
def simulating(arrivals: Sequence[Any]) -> Iterator[Callable[[float, int], None] | None]:
    """While one simulation of requests ``arrivals`` (in arrival order, each with an
    ``arrival_s``) runs: the hook for its recorder's ``on_sample`` (``clock``, requests in
    flight), or None when no progress is shown. Requests done = those arrived by ``clock``
    less those in flight; the hook walks the arrivals once over the whole run."""
    board = _board
    if board is None:
        yield None
        return
    slot, total = board.slot(), len(arrivals)
    arrived = 0

    def sampled(clock: float, in_flight: int) -> None:
        nonlocal arrived
        while arrived < total and arrivals[arrived].arrival_s <= clock:
            arrived += 1
        board.running(slot, max(0, arrived - in_flight), total)

    board.running(slot, 0, total)
    try:
        yield sampled
    finally:
        board.ended(slot)


def per_replica(
    on_sample: Callable[[float, int], None], replicas: int
) -> list[Callable[[float, int], None]]:
    """One hook per replica of a cluster, each reporting the requests in flight on every
    replica (as each last reported) to ``on_sample``."""
    in_flight = [0] * replicas

    def hook(index: int) -> Callable[[float, int], None]:
        def sampled(clock: float, count: int) -> None:
            in_flight[index] = count
            on_sample(clock, sum(in_flight))

        return sampled

    return [hook(i) for i in range(replicas)]


class LiveProgress:
    """A live replay's requests sent and ended, on the board."""

    def __init__(self, board: Board, total: int) -> None:
        self.board, self.slot, self.total = board, board.slot(), total
        self.sent_count = self.ended_count = 0
        board.running(self.slot, 0, total, 0)

    def sent(self) -> None:
        self.sent_count += 1
        self.board.running(self.slot, self.ended_count, self.total, self.sent_count)

    def ended(self, count: int = 1) -> None:
        self.ended_count += count
        self.board.running(self.slot, self.ended_count, self.total, self.sent_count)

    def close(self) -> None:
        self.board.ended(self.slot)


def live_replay(total: int) -> LiveProgress | None:
    """A live replay of ``total`` requests starts: its progress, or None when none is
    shown."""
    return LiveProgress(_board, total) if _board is not None else None


# -- what a command tracks: its items ----------------------------------------------------


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


def _snapshot() -> Snapshot:
    return _board.read() if _board is not None else Snapshot()


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


# -- the display -------------------------------------------------------------------------

_shown = False
_draw_lock = threading.Lock()  # held while the display writes; a fork waits for it


def _after_fork_in_child() -> None:
    global _draw_lock
    _draw_lock = threading.Lock()  # the copy is held (the parent took it to fork)


os.register_at_fork(
    before=lambda: _draw_lock.acquire(),
    after_in_parent=lambda: _draw_lock.release(),
    after_in_child=_after_fork_in_child,
)


def show_progress(shown: bool = True) -> None:
    """Show the progress of commands from now on (the ``schedkit`` command does), on
    stderr."""
    global _shown
    _shown = shown


class _Display:
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
        snap = _snapshot()
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
    global _board
    tracker = Tracker(what, total, unit, runs, fine, done=started_at, started_at=started_at)
    display = None
    if _shown and _board is None:
        _board = Board()
        display = _Display(tracker, sys.stderr, intro)
    try:
        if display is not None:
            display.start()  # in the try: a Ctrl-C from now on is summarised
        yield tracker
    except KeyboardInterrupt:
        if kept is None:  # the caller says what it kept (a sweep: its probe points)
            raise
        runs_note = ""
        if runs is not None and display is not None:
            runs_note = f", {_snapshot().runs:,} {runs} run"
        raise Interrupted(f"interrupted {tracker.summary()}{runs_note}; {kept}") from None
    finally:
        if display is not None:
            display.stop()
            _board = None
