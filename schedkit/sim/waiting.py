"""The simulated engine's waiting queue: FIFO, or kept in ``waiting_key`` order.

Without a ``waiting_key`` policy the queue is vLLM's deque: arrivals at the back,
preempted requests at the front. With one, the engine owns the order: a request's key is
asked once, when it joins (``append`` on arrival, ``appendleft`` after a preemption), and
the request is inserted where it belongs (``bisect``: O(log n) comparisons), so no step
pays for sorting the queue or for checking a permutation. Ties keep the deque's order: a
sequence number grows at the back and shrinks at the front.

``order_waiting`` (a list hook) may still reorder the queue for one step: ``reorder``
sets the order admission walks until ``end_step``; the keyed order stays underneath.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from schedkit.facade import PolicyFacade
from schedkit.views import EngineView, RequestView

R = TypeVar("R", bound=RequestView)

__all__ = ["FifoWaiting", "KeyedWaiting", "make_waiting"]


class FifoWaiting(deque[R]):
    """vLLM's waiting deque, with the two calls the keyed queue needs."""

    def reorder(self, order: Iterable[R]) -> None:
        self.clear()
        self.extend(order)

    def end_step(self) -> None:
        pass


class KeyedWaiting(Generic[R]):
    """The waiting queue in (policy key, engine order) order."""

    __slots__ = ("_back", "_entries", "_facade", "_front", "_of", "_override", "_view")

    def __init__(self, facade: PolicyFacade, view: EngineView) -> None:
        self._facade = facade
        self._view = view
        # (key, sequence, request): sequences are unique, so requests are never compared
        self._entries: list[tuple[tuple[Any, ...], int, R]] = []
        self._of: dict[int, tuple[tuple[Any, ...], int, R]] = {}  # id(request) -> entry
        self._back = 0
        self._front = 0
        self._override: deque[R] | None = None

    def _insert(self, request: R, sequence: int) -> None:
        key = self._facade.waiting_key(request, self._view) or ()
        entry = (key, sequence, request)
        self._of[id(request)] = entry
        insort(self._entries, entry)

    def append(self, request: R) -> None:
        self._back += 1
        self._insert(request, self._back)
        if self._override is not None:
            self._override.append(request)

    def appendleft(self, request: R) -> None:
        """``request`` first (one the step preempts: before the policy's order too)."""
        self._front -= 1
        self._insert(request, self._front)
        if self._override is not None:
            self._override.appendleft(request)

    def popleft(self) -> R:
        if self._override is None:
            _, _, request = self._entries.pop(0)
            del self._of[id(request)]
            return request
        request = self._override.popleft()
        entry = self._of.pop(id(request))
        del self._entries[bisect_left(self._entries, entry)]
        return request

    def __getitem__(self, index: int) -> R:
        if self._override is not None:
            return self._override[index]
        return self._entries[index][2]

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[R]:
        if self._override is not None:
            return iter(self._override)
        return (entry[2] for entry in self._entries)

    def reorder(self, order: Iterable[R]) -> None:
        """Admit in ``order`` (a permutation of the queue) until ``end_step``."""
        self._override = deque(order)

    def end_step(self) -> None:
        self._override = None


def make_waiting(facade: PolicyFacade, view: EngineView) -> FifoWaiting[Any] | KeyedWaiting[Any]:
    """The queue the engine needs: keyed when a policy implements ``waiting_key``."""
    return KeyedWaiting(facade, view) if facade.has_waiting_key else FifoWaiting()
