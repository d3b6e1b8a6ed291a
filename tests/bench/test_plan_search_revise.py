"""Searches whose caps hang on other searches' answers, run at once on one pool
(``probe_all``'s ``revise``): a search whose cap is provisional may run probes under it,
but is done only under its final cap, with the probes and the answer it has run after
the searches it hangs on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from schedkit.bench.plan import PlanSpec, run_plan
from schedkit.bench.plan_search import fewest_meeting, next_probe, probe_all
from schedkit.bench.runner import BenchSpec

THRESHOLDS = [3, 6, 64, 2, 5]  # the fewest replicas meeting, per search (64: none)
FIRST = range(3)  # the searches the others' caps hang on, up to 32 replicas
PROVISIONAL_CAP = 8  # the last two's caps until the first three are done
FINAL_CAPS = [1, 4]  # then: under them, neither meets (under 8, both would)


def probe(search: int, replicas: int) -> dict[str, Any]:
    return {"meets": replicas >= THRESHOLDS[search]}


def revise(results: Sequence[Mapping[int, Any]]) -> tuple[list[int], set[int]]:
    verdicts = [{n: bool(p["meets"]) for n, p in r.items()} for r in results]
    if all(next_probe(verdicts[i], 32) is None for i in FIRST):
        return [32, 32, 32, *FINAL_CAPS], set()
    return [32, 32, 32, PROVISIONAL_CAP, PROVISIONAL_CAP], {3, 4}


class Inline(Executor):
    """Runs each probe as it is submitted: the same interleaving on every run."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def staged() -> list[dict[int, Any]]:
    """The first three searched, then the last two under their final caps."""
    first = probe_all(3, 32, probe, None, lambda i: None)
    last = probe_all(2, FINAL_CAPS, lambda i, n: probe(i + 3, n), None, lambda i: None)
    return first + last


def asked(probes: Mapping[int, Any], most: int) -> tuple[list[int], int | None]:
    """The probes a search up to ``most`` asks for, and its answer."""
    seen: list[int] = []

    def meets(n: int) -> bool:
        seen.append(n)
        return bool(probes[n]["meets"])

    return sorted(set(seen)), fewest_meeting(meets, most)


def test_a_provisional_search_runs_probes_but_is_done_only_under_its_final_cap() -> None:
    done: list[int] = []
    first_done_when: dict[int, bool] = {}

    def mark(i: int) -> None:
        first_done_when[i] = all(j in done for j in FIRST)
        done.append(i)

    # four workers, three of the first searches at a time: the fourth probes ahead
    results = probe_all(5, 32, probe, Inline(), mark, 4, revise)
    assert sorted(done) == list(range(5))
    assert first_done_when[3] and first_done_when[4]  # never done under the provisional cap
    assert 2 in results[3] and 8 in results[4]  # probes run under it, kept
    plain = staged()
    for i, (mine, alone) in enumerate(zip(results, plain, strict=True)):
        most = 32 if i in FIRST else FINAL_CAPS[i - 3]
        assert alone.items() <= mine.items()
        assert asked(mine, most) == asked(alone, most)  # the probes it reports, its answer
    assert [asked(r, FINAL_CAPS[i])[1] for i, r in enumerate(results[3:])] == [None, None]


def test_one_by_one_each_search_runs_once_its_cap_is_final_and_no_probe_more() -> None:
    done: list[int] = []
    results = probe_all(5, 32, probe, None, done.append, 1, revise)
    assert done == [0, 1, 2, 3, 4]
    assert results == staged()


def disagg_plan(jobs: int, workload: str, slos: tuple[float, float], **changes: Any) -> PlanSpec:
    bench = BenchSpec(
        workload=workload, policies=["least-loaded"], slo_ttft_ms=slos[0], slo_tpot_ms=slos[1],
        jobs=jobs,
    )  # fmt: skip
    return PlanSpec(
        bench=bench, gpus=["H100-SXM", "A100-80GB"], tps=[1, 2], max_replicas=16, disagg=True,
        **changes,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("workload", "slos", "changes"),
    [
        # prefill decides: every phase pruned, some after probes under a provisional cap
        ("poisson:rate=24,n=300,prompt=3000,output=100", (600.0, 60.0),
         {"prices": {"H100-SXM": 3.0, "A100-80GB": 1.8}}),
        # a prefill and a decode phase sized, one pair searched from them
        ("poisson:rate=20,n=300,prompt=1500,output=300", (1000.0, 40.0), {}),
    ],
)  # fmt: skip
def test_a_pruned_disaggregated_plan_on_one_pool_is_the_one_searched_stage_by_stage(
    workload: str, slos: tuple[float, float], changes: dict[str, Any]
) -> None:
    """The aggregated candidates and the phases alone share a pool, the phases' caps
    revised as answers come in: every probe reported and every figure as one by one."""
    pooled = run_plan(disagg_plan(2, workload, slos, **changes))
    assert pooled == run_plan(disagg_plan(1, workload, slos, **changes))
