"""What ordering a large waiting queue costs per step: list hook vs key hook (issue #13).

    taskset -c 0 .venv/bin/python benchmarks/speed/bench_keys.py [--waiting 16000] [--steps 50]

A queue of ``--waiting`` requests (random priorities); each step admits ``--admit`` of them
from the front and as many new ones arrive. Per step, the engine side costs:

- ``list``: ``order_waiting`` returning ``sorted(waiting)``; the facade checks that the
  answer is a permutation of the queue (today's path for ``priority``);
- ``key, facade``: ``waiting_key`` through ``PolicyFacade.order_waiting``: each request's
  key is asked once, when it joins, and the facade sorts the queue by the cached keys
  every step (the path of the vLLM and SGLang adapters);
- ``key, keyed queue``: the simulator's ``KeyedWaiting``: a request is inserted in key
  order when it joins (O(log n) comparisons), so a step only pops what it admits.

Times are CPU seconds per step (``time.process_time``), best of ``--repeat``; the ratio is
against ``list`` measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from schedkit import EngineState, EngineView, Policy, PolicyFacade, RequestState, hookimpl
from schedkit.sim.waiting import KeyedWaiting


class ByPriorityList(Policy):
    @hookimpl
    def order_waiting(
        self, waiting: Sequence[RequestState], engine: EngineView
    ) -> list[RequestState]:
        return sorted(waiting, key=lambda r: (r.priority, r.arrival_time))


class ByPriorityKey(Policy):
    @hookimpl
    def waiting_key(self, request: RequestState, engine: EngineView) -> tuple[int, float]:
        return (request.priority, request.arrival_time)


def _requests(n: int, start: int, rng: random.Random) -> list[RequestState]:
    out = []
    for i in range(start, start + n):
        request = RequestState(f"r{i}", 100, 16, arrival_time=float(i))
        request.priority = rng.randint(0, 9)
        out.append(request)
    return out


def facade_path(policy: Policy, waiting: int, steps: int, admit: int) -> float:
    rng = random.Random(0)
    facade, engine = PolicyFacade([("p", policy)]), EngineState(1000, 16)
    queue = _requests(waiting, 0, rng)
    facade.order_waiting(queue, engine)  # keys of the first queue: not a step's cost
    spent, serial = 0.0, waiting
    for _ in range(steps):
        started = time.process_time()
        order = facade.order_waiting(queue, engine)
        queue = list(order) if order is not None else queue
        del queue[:admit]
        spent += time.process_time() - started
        queue += _requests(admit, serial, rng)  # arrivals between steps, not timed
        serial += admit
    return spent / steps


def keyed_queue(waiting: int, steps: int, admit: int) -> float:
    rng = random.Random(0)
    facade, engine = PolicyFacade([("p", ByPriorityKey())]), EngineState(1000, 16)
    queue: KeyedWaiting[RequestState] = KeyedWaiting(facade, engine)
    for request in _requests(waiting, 0, rng):
        queue.append(request)
    spent, serial = 0.0, waiting
    for _ in range(steps):
        arrivals = _requests(admit, serial, rng)
        serial += admit
        started = time.process_time()  # joining (its key, the insertion) counts here
        for request in arrivals:
            queue.append(request)
        for _ in range(admit):
            queue.popleft()
        spent += time.process_time() - started
    return spent / steps


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=16_000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--admit", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, steps, admit = args.waiting, args.steps, args.admit
    arms = {
        "list (order_waiting)": lambda: facade_path(ByPriorityList(), n, steps, admit),
        "key, facade (adapters)": lambda: facade_path(ByPriorityKey(), n, steps, admit),
        "key, keyed queue (sim)": lambda: keyed_queue(n, steps, admit),
    }
    times = {name: best(fn, args.repeat) for name, fn in arms.items()}
    base = times["list (order_waiting)"]
    print(f"{n:,} waiting, {admit} admitted and {admit} arriving per step, {steps} steps")
    print("| path | ms per step | vs list |")
    print("|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1000:.3f} | {seconds / base:.3f}x |")


if __name__ == "__main__":
    main()
