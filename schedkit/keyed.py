"""The waiting queue in ``waiting_key`` order, kept by the facade for engines that keep
none of their own (vLLM, SGLang; the simulator keeps ``sim.waiting.KeyedWaiting``).

A request's key is asked once each time it joins the queue: the order is kept between
calls, a request not seen waiting since it last joined (arrival, or a preemption, which
the step reports name) is keyed and inserted (bisect), and requests no longer waiting are
dropped. Ties keep the engine's order: a preempted request goes ahead of its equals (the
last preempted first, at the front of the engine's queue), an arrival behind them, in
arrival order. Requests that did not move cost dict and set operations, no Python code
each: at 16,000 waiting this costs 0.68x of a list hook's sort and permutation check
(``benchmarks/speed/bench_keys.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any

from schedkit.views import RequestView

__all__ = ["WaitingOrder"]

Entry = tuple[tuple[Any, ...], int, int]  # key, sequence, id(view)
_VIEW_ID = itemgetter(2)


class WaitingOrder:
    """The keyed order of the requests waiting at the last call."""

    __slots__ = ("known", "order", "sequence")

    def __init__(self) -> None:
        # id(view) -> (its entry, the view: held, so its id is not reused)
        self.known: dict[int, tuple[Entry, RequestView]] = {}
        self.order: list[Entry] = []  # sorted
        self.sequence = 0

    def sort(
        self, waiting: Sequence[RequestView], key: Callable[[RequestView], tuple[Any, ...]]
    ) -> list[RequestView]:
        """``waiting`` in key order; ``key`` is asked for the requests that joined."""
        present = dict(zip(map(id, waiting), waiting, strict=True))
        known, order = self.known, self.order
        gone = known.keys() - present.keys()
        if len(gone) > 64:
            order[:] = [entry for entry in order if entry[2] not in gone]
            for vid in gone:
                del known[vid]
        else:
            for vid in gone:
                del order[bisect_left(order, known.pop(vid)[0])]
        joined = present.keys() - known.keys()
        if len(joined) > 1:  # keyed in the engine's order, so equal keys keep it
            position = dict(zip(present, range(len(present)), strict=True))
            joined = sorted(joined, key=position.__getitem__)  # type: ignore[assignment]
        preempted = [vid for vid in joined if present[vid].num_preemptions]
        arrived = [vid for vid in joined if not present[vid].num_preemptions]
        for vid, step in [(v, -1) for v in reversed(preempted)] + [(v, 1) for v in arrived]:
            self.sequence += 1
            view = present[vid]
            entry = (key(view), step * self.sequence, vid)
            known[vid] = (entry, view)
            insort(order, entry)
        return list(map(present.__getitem__, map(_VIEW_ID, order)))

    def rejoin(self, views: Iterable[RequestView]) -> None:
        """``views`` were preempted: each is keyed again when next seen waiting."""
        known, order = self.known, self.order
        for view in views:
            item = known.pop(id(view), None)
            if item is not None:
                del order[bisect_left(order, item[0])]
