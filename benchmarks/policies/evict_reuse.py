"""How much could any eviction policy gain on mooncake-conv? An idealised cache study.

Replays the prefix-hash references of the first N requests of ``mooncake-conv`` (one
reference per 512-token hash id, in arrival order) through a cache of C hash ids (C x 32
blocks of 16 tokens) with no running requests pinning blocks, and reports the fraction of
references that hit under:

- LRU (the engine default's order),
- LFU (fewest hits first, ties LRU),
- LOOKAHEAD-W: LRU, but ids that one of the next W requests references are evicted last
  (what a policy could do if it saw the hashes of W waiting requests),
- OPT: Belady's optimal offline policy (evict the id used furthest in the future),

plus the LRU stack distance of every reuse. The simulator's figures are lower: there,
running requests pin most of the cache and only unreferenced blocks can be evicted.

    python benchmarks/policies/evict_reuse.py --requests 1500
"""

from __future__ import annotations

import argparse
import heapq
from collections import Counter, OrderedDict
from collections.abc import Sequence

from schedkit.workload import load_workload

BLOCKS_PER_ID = 512 // 16
NEVER = 1 << 62


def lru(refs: Sequence[int], capacity: int) -> float:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for h in refs:
        if h in cache:
            hits += 1
            cache.move_to_end(h)
        else:
            cache[h] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits / len(refs)


def lfu(refs: Sequence[int], capacity: int) -> float:
    hits_of: Counter[int] = Counter()
    cache: dict[int, int] = {}  # id -> time of last use
    hits = 0
    for t, h in enumerate(refs):
        if h in cache:
            hits += 1
            hits_of[h] += 1
        elif len(cache) >= capacity:
            del cache[min(cache, key=lambda k: (hits_of[k], cache[k]))]
        cache[h] = t
    return hits / len(refs)


def lookahead(requests: Sequence[Sequence[int]], capacity: int, window: int) -> float:
    upcoming: Counter[int] = Counter()
    for ids in requests[:window]:
        upcoming.update(set(ids))
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for i, ids in enumerate(requests):
        upcoming.subtract(set(ids))
        if i + window < len(requests):
            upcoming.update(set(requests[i + window]))
        for h in ids:
            total += 1
            if h in cache:
                hits += 1
                cache.move_to_end(h)
                continue
            cache[h] = None
            if len(cache) > capacity:
                victim = next((k for k in cache if upcoming[k] <= 0), next(iter(cache)))
                del cache[victim]
    return hits / total


def opt(refs: Sequence[int], capacity: int) -> float:
    next_use = [NEVER] * len(refs)
    seen: dict[int, int] = {}
    for i in range(len(refs) - 1, -1, -1):
        next_use[i] = seen.get(refs[i], NEVER)
        seen[refs[i]] = i
    cache: dict[int, int] = {}  # id -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, id), stale entries skipped
    hits = 0
    for i, h in enumerate(refs):
        if h in cache:
            hits += 1
        elif len(cache) >= capacity:
            while True:
                negative, victim = heapq.heappop(heap)
                if cache.get(victim) == -negative:
                    del cache[victim]
                    break
        cache[h] = next_use[i]
        heapq.heappush(heap, (-next_use[i], h))
    return hits / len(refs)


def stack_distances(refs: Sequence[int]) -> list[int]:
    """Distinct ids referenced since the previous reference, for every reuse."""
    stack: OrderedDict[int, None] = OrderedDict()
    out = []
    for h in refs:
        if h in stack:
            keys = list(stack)
            out.append(len(keys) - 1 - keys.index(h))
            stack.move_to_end(h)
        else:
            stack[h] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--blocks", type=int, nargs="+", default=[4000, 8000, 12000, 32000])
    args = parser.parse_args()
    requests = [
        r.hash_ids for r in load_workload("mooncake-conv").truncated(args.requests).requests
    ]
    refs = [h for ids in requests for h in ids]
    dist = sorted(stack_distances(refs))
    print(f"{len(refs)} hash references, {len(set(refs))} distinct ids, {len(dist)} reuses")
    print(f"infinite cache: {len(dist) / len(refs):.4f} of references hit")
    quartiles = [dist[len(dist) * q // 4] * BLOCKS_PER_ID for q in (1, 2, 3)]
    print(f"reuse distance in blocks: p25 {quartiles[0]}, p50 {quartiles[1]}, p75 {quartiles[2]}")
    print("| blocks | LRU | LFU | LOOKAHEAD-32 | LOOKAHEAD-128 | OPT |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for blocks in args.blocks:
        c = blocks // BLOCKS_PER_ID
        cells = [lru(refs, c), lfu(refs, c), lookahead(requests, c, 32)]
        cells += [lookahead(requests, c, 128), opt(refs, c)]
        print(f"| {blocks} | " + " | ".join(f"{x:.4f}" for x in cells) + " |")


if __name__ == "__main__":
    main()
