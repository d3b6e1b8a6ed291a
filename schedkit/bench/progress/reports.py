"""What a run reports of how far it is, for the progress display: a few numbers per
process in memory shared with the worker processes forked after the board was made.

The simulator reports once per sampled second of simulated time (``Recorder.on_sample``:
no call at all per step, and none when nothing is shown), a live replay per request sent
and ended. Nothing here draws: the display's thread reads the board
(``schedkit.bench.progress.display``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray
from typing import Any

__all__ = [
    "Board",
    "LiveProgress",
    "Snapshot",
    "live_replay",
    "per_replica",
    "simulating",
    "snapshot",
]

SLOTS = 256  # processes that report at once (one more shares the last slot)
_DONE, _TOTAL, _SENT, _RUNS = range(4)  # a slot: requests done, of total, sent; runs ended


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


def snapshot() -> Snapshot:
    """The board as it is now; an empty one when no display runs."""
    return _board.read() if _board is not None else Snapshot()


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
