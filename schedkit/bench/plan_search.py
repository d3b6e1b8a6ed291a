"""The search a plan runs for each candidate, and running the probes of several searches
at once.

Each candidate's search (:func:`fewest_meeting`) asks for one probe at a time: whether
the deployment meets the attainment target at some replica count. :func:`next_probe`
replays it on the verdicts known so far to say which probe it needs next, so the
searches can be driven one probe at a time, in any interleaving, and still ask for the
same probes in the same order and reach the same answers as run one after another.

:func:`probe_all` runs every search, in this process or on a pool of workers. With a
pool, a worker that falls free takes the next probe of the search with the fewest
verdicts so far (ties: the candidate given first; a search whose cap is provisional,
below, comes after every other). When no search needs a probe that is not already
running, it takes one a search may need next: the count the search would ask for if the
probe it is waiting for missed (or, failing that, met). Such a probe's result is kept
for the search should it ask; a search only ever reports the probes it asked for.

A search's cap (the most replicas it tries) may hang on other searches' answers, as a
plan's phases sized alone hang on its aggregated candidates' (``revise``). Until the
searches it hangs on have their answers, its cap is provisional: an estimate its probes
may run under (kept as those run ahead are), but the search is not done, whatever it
would answer under it. Once its cap is final, the search asks for the probes it would
under that cap and is done when it has its answer, as any other. So every search ends
with the probes and the answer it would have had run after those it hangs on, and the
workers never wait for one stage of searches to end before the next starts. Without a
pool, the searches run one after another: the first (in the order given) whose cap is
final, to its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

__all__ = ["fewest_meeting", "next_probe", "probe_all", "settled"]

Probe = dict[str, Any]  # one probe's figures; its verdict is ``meets``
# The results so far -> every search's cap, and the searches whose caps are provisional.
Revise = Callable[[Sequence[Mapping[int, Probe]]], tuple[Sequence[int], Set[int]]]


def fewest_meeting(meets: Callable[[int], bool], max_replicas: int) -> int | None:
    """The fewest replicas (up to ``max_replicas``) for which ``meets`` holds, or None:
    doubling from 1 until it holds, then bisecting between the last count that missed and
    the first that met it (so it assumes one more replica never hurts)."""
    low, high = 0, 1  # low: a count known to miss (0: none yet); high: the count to try
    while high <= max_replicas and not meets(high):
        low, high = high, high * 2
    if high > max_replicas:
        if low < max_replicas and meets(max_replicas):
            high = max_replicas
        else:
            return None
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            high = mid
        else:
            low = mid
    return high


class _Unknown(Exception):
    """The search needs a verdict not known yet (its replica count is the argument)."""


def next_probe(known: Mapping[int, bool], max_replicas: int) -> int | None:
    """The replica count the search probes next, given the verdicts ``known`` (replica
    count -> meets the target), or None once it has its answer."""

    def meets(replicas: int) -> bool:
        if replicas not in known:
            raise _Unknown(replicas)
        return known[replicas]

    try:
        fewest_meeting(meets, max_replicas)
    except _Unknown as unknown:
        return int(unknown.args[0])
    return None


def probe_all(
    searches: int,
    max_replicas: int | Sequence[int],
    probe: Callable[[int, int], Probe],
    pool: Executor | None,
    done: Callable[[int], None],
    workers: int = 1,
    revise: Revise | None = None,
) -> list[dict[int, Probe]]:
    """Every search's probes (replica count -> figures; those run ahead for it that it
    never asked for included): ``probe(search, replicas)`` runs one, in this process
    (``pool`` None: one search after another) or on ``pool``'s ``workers`` processes;
    ``done(search)`` is called as each search has its answer. ``max_replicas``: the
    largest count each search tries (one for all, or one per search); ``revise``, where
    caps hang on answers: from the results so far, every search's cap and those that are
    provisional (called after every probe; a cap once final must stay so, and a search
    must have a final cap once those it hangs on are done)."""
    results: list[dict[int, Probe]] = [{} for _ in range(searches)]
    most = [max_replicas] * searches if isinstance(max_replicas, int) else list(max_replicas)
    caps = revise or (lambda results: (most, frozenset()))
    if pool is None:
        _one_by_one(results, probe, done, caps)
    else:
        _Scheduler(results, caps, probe, pool, done, workers).run()
    return results


def _one_by_one(
    results: list[dict[int, Probe]],
    probe: Callable[[int, int], Probe],
    done: Callable[[int], None],
    revise: Revise,
) -> None:
    """Each search to its answer in turn: the first left whose cap is final."""
    left = list(range(len(results)))
    while left:
        most, provisional = revise(results)
        i = next((i for i in left if i not in provisional), None)
        if i is None:
            raise RuntimeError("every search left has a provisional cap")
        while (n := next_probe(_verdicts(results[i]), most[i])) is not None:
            results[i][n] = probe(i, n)
        left.remove(i)
        done(i)


def _verdicts(probes: Mapping[int, Probe]) -> dict[int, bool]:
    return {n: bool(p["meets"]) for n, p in probes.items()}


def settled(probes: Mapping[int, Probe], most: int) -> tuple[bool, Probe | None]:
    """Whether a search up to ``most`` replicas has its answer in ``probes``, and the
    probe at its answer (None: none, or not yet)."""
    verdicts = _verdicts(probes)
    if next_probe(verdicts, most) is not None:
        return False, None
    high = fewest_meeting(verdicts.__getitem__, most)
    return True, None if high is None else probes[high]


class _Scheduler:
    """The searches' probes on a pool, as many at once as it has workers."""

    def __init__(
        self,
        results: list[dict[int, Probe]],
        revise: Revise,
        probe: Callable[[int, int], Probe],
        pool: Executor,
        done: Callable[[int], None],
        workers: int,
    ) -> None:
        self.results, self.revise, self.probe = results, revise, probe
        self.pool, self.done, self.workers = pool, done, workers
        self.running: dict[Future[Probe], tuple[int, int]] = {}
        self.finished: set[int] = set()
        self.max_replicas: Sequence[int] = []
        self.provisional: Set[int] = frozenset()

    def run(self) -> None:
        self._settle()
        while len(self.finished) < len(self.results):
            self._fill()
            if not self.running:
                raise RuntimeError("every search left has a provisional cap")
            ended, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for future in ended:
                i, n = self.running.pop(future)
                self.results[i][n] = future.result()  # a failed probe fails the plan now
            self._settle()

    def _settle(self) -> None:
        """Revise the caps, and mark the searches that have their answer under a final
        cap done, in the order given."""
        self.max_replicas, self.provisional = self.revise(self.results)
        for i in range(len(self.results)):
            if i in self.finished or i in self.provisional:
                continue
            if self._next(i) is None:
                self.finished.add(i)
                self.done(i)

    def _next(self, i: int, assume: tuple[int, bool] | None = None) -> int | None:
        known = _verdicts(self.results[i])
        if assume is not None:
            known[assume[0]] = assume[1]
        return next_probe(known, self.max_replicas[i])

    def _fill(self) -> None:
        """Start probes until every worker has one: those searches need, else those
        they may need next."""
        while len(self.running) < self.workers:
            wanted = self._needed() or self._ahead()
            if wanted is None:
                return
            future = self.pool.submit(self.probe, *wanted)
            self.running[future] = wanted

    def _order(self) -> list[int]:
        """The searches, those with final caps first, then by fewest verdicts."""

        def key(i: int) -> tuple[bool, int]:
            return i in self.provisional, len(self.results[i])

        return sorted(range(len(self.results)), key=key)

    def _needed(self) -> tuple[int, int] | None:
        """The next probe of the search first in order (``_order``), not running yet."""
        busy = set(self.running.values())
        for i in self._order():
            n = self._next(i) if i not in self.finished else None
            if n is not None and (i, n) not in busy:
                return i, n
        return None

    def _ahead(self) -> tuple[int, int] | None:
        """A probe a search may need once the probe it waits for ends: the one it would
        ask for if that probe missed, else if it met."""
        busy = set(self.running.values())
        for i in self._order():
            n = self._next(i) if i not in self.finished else None
            if n is None:
                continue
            for verdict in (False, True):
                m = self._next(i, (n, verdict))
                if m is not None and (i, m) not in busy and m not in self.results[i]:
                    return i, m
        return None
