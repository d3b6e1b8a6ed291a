"""vLLM's prefill cadence (``prefill_schedule_interval``) and cache-aware admission
(``cache_aware_admission_window``/``_threshold``) in the simulator (issue #39 item 4).
Every scenario runs step by step and with decode stretches, which must agree."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from _fixtures import by_id, engine, record_diffs, req

from schedkit.records import RequestRecord
from schedkit.sim.config import SimConfig
from schedkit.workload import TraceRequest

STEP = 0.01  # TEN_MS: every step takes 10 ms, so step k starts at (k - 1) x 10 ms


def _run(requests: list[TraceRequest], config: SimConfig) -> dict[str, RequestRecord]:
    """The records of one run, checked to be the same with and without decode stretches."""
    stepped = engine(requests, config, stretch=False).run()
    stretched = engine(requests, config, stretch=True).run()
    assert not record_diffs(stepped.records, stretched.records, rel=1e-9)
    return by_id(stepped)


def _step_of(seconds: float | None) -> int:
    """The 1-based step starting at ``seconds`` (steps run back to back from 0)."""
    assert seconds is not None
    return round(seconds / STEP) + 1


# one request decodes throughout; short ones arrive every 1.5 steps
DECODING = [req("long", 0.0, 32, 200)] + [req(f"s{i}", 0.105 + 0.015 * i, 32, 2) for i in range(6)]


@pytest.mark.parametrize("interval", [2, 4])
def test_prefill_waits_interval_steps_after_the_last_prefill(interval: int) -> None:
    config = SimConfig(num_blocks=1000, prefill_schedule_interval=interval)
    records = _run(DECODING, config)
    unheld = _run(DECODING, SimConfig(num_blocks=1000))
    # vLLM's rule, stepped by hand: a step is held while fewer than `interval` steps
    # have passed since the last one that carried prefill; a release admits every short
    # due by then (each prompt is one chunk), and so restarts the hold
    free = {f"s{i}": _step_of(unheld[f"s{i}"].scheduled_s) for i in range(6)}
    expected, last = {}, _step_of(records["long"].scheduled_s)  # step 1 carried the long one
    for step in range(1, 200):
        due = [rid for rid, at in free.items() if at <= step and rid not in expected]
        if due and step - last >= interval:
            expected.update(dict.fromkeys(due, step))
            last = step
    assert {rid: _step_of(records[rid].scheduled_s) for rid in free} == expected
    assert expected != free  # the hold moved some admissions
    # decoding is never held: the long request emits a token every step
    long = records["long"]
    assert long.finish_s is not None and long.first_token_s is not None
    assert long.finish_s - long.first_token_s == pytest.approx(199 * STEP)


def test_a_held_step_runs_no_chunk_of_an_admitted_prompt() -> None:
    requests = [req("d", 0.0, 16, 100), req("p", 0.005, 256, 2)]

    def small(**knobs: Any) -> SimConfig:  # p prefills in 5 chunks
        return SimConfig(num_blocks=1000, max_num_batched_tokens=64, **knobs)

    free = _run(requests, small())["p"]
    held = _run(requests, small(prefill_schedule_interval=3))["p"]
    assert free.first_token_s is not None and held.first_token_s is not None
    chunks_free = _step_of(free.first_token_s) - _step_of(free.scheduled_s)
    chunks_held = _step_of(held.first_token_s) - _step_of(held.scheduled_s)
    assert chunks_free == 5  # five chunks on five consecutive steps
    assert chunks_held == 4 * 3 + 1  # one chunk every third step


def test_no_step_is_held_while_nothing_decodes() -> None:
    # requests arriving to an idle engine, each finished before the next: never held
    requests = [req(f"r{i}", 0.5 * i, 64, 2) for i in range(5)]
    free = _run(requests, SimConfig(num_blocks=1000))
    held = _run(requests, SimConfig(num_blocks=1000, prefill_schedule_interval=8))
    assert not record_diffs(list(free.values()), list(held.values()))


def test_a_release_that_leaves_requests_waiting_stops_the_hold() -> None:
    # two seats: the long decode and one short; a burst of shorts queues behind them
    burst = [req("long", 0.0, 32, 300)] + [req(f"s{i}", 0.1, 32, 2) for i in range(6)]
    config = SimConfig(num_blocks=1000, max_num_seqs=2, prefill_schedule_interval=8)
    records = _run(burst, config)
    steps = sorted(_step_of(records[f"s{i}"].scheduled_s) for i in range(6))
    # each short is admitted as soon as the one before it finishes (2 steps), not 8 later
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert gaps == [2] * 5, steps


# 64-token hash blocks: 'warm' stays resident; 'hot' shares its first three blocks
def _hashed(**knobs: Any) -> SimConfig:
    return SimConfig(num_blocks=200, hash_block_tokens=64, max_num_seqs=2, **knobs)


PREFIXES = [
    req("warm", 0.0, 256, 60, hash_ids=(1, 2, 3, 4)),
    req("cold", 0.1, 256, 2, hash_ids=(7, 8, 9, 10)),
    req("hot", 0.1, 256, 2, hash_ids=(1, 2, 3, 11)),
]


def _admitted_first(config: SimConfig) -> str:
    records = _run(PREFIXES, config)
    return min(("cold", "hot"), key=lambda rid: records[rid].scheduled_s or 0.0)


def test_cache_aware_window_admits_the_cached_prefix_first() -> None:
    assert _admitted_first(_hashed()) == "cold"  # arrival order
    window = _hashed(cache_aware_admission_window=4, cache_aware_admission_threshold=0)
    assert _admitted_first(window) == "hot"


def test_cache_aware_window_waits_for_its_usage_threshold() -> None:
    # 'warm' holds 16 of 200 blocks (8%): below a 0.5 threshold nothing is reordered
    roomy = _hashed(cache_aware_admission_window=4)
    assert _admitted_first(roomy) == "cold"
    tight = _hashed(cache_aware_admission_window=4, cache_aware_admission_threshold=0.05)
    assert _admitted_first(tight) == "hot"


def test_cache_aware_window_needs_prefix_caching() -> None:
    off = _hashed(enable_prefix_caching=False, cache_aware_admission_window=4,
                    cache_aware_admission_threshold=0)  # fmt: skip
    assert _admitted_first(off) == "cold"


def test_vllm_knobs_are_refused_with_sglang_batches() -> None:
    with pytest.raises(ValueError, match="need vLLM's batches"):
        SimConfig(num_blocks=10, mixed_prefill=False, prefill_schedule_interval=2)


def test_default_knobs_change_nothing() -> None:
    base = list(_run(DECODING, SimConfig(num_blocks=1000)).values())
    for knob in ({"prefill_schedule_interval": 1}, {"cache_aware_admission_window": 0}):
        assert not record_diffs(
            list(_run(DECODING, SimConfig(num_blocks=1000).model_copy(update=knob)).values()), base
        )
