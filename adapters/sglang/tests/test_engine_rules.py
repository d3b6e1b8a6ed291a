"""SGLang's own scheduling rules where the adapter intervenes, on the real engine (CPU,
tiny random model), without a schedkit config, with ``fcfs`` and with ``priority``.

SGLang's scheduler tests check these rules; SGLang publishes no source distribution (and
its unit tests need a newer SGLang than 0.5.23), so these tests are our own:

- retraction: when decode needs memory, SGLang retracts the decoding request with the
  fewest output tokens, then the longest prompt (``_get_decode_retraction_order``); a
  victim policy's order replaces it (``priority``: the worst priority, then the newest);
- priority preemption (``--enable-priority-scheduling``): a request whose priority beats
  running ones by more than the threshold preempts the worst running priority, the newest
  among equals (``PrefillAdder.preempt_to_schedule``), also under ``priority``;
- radix eviction: the least recently used cached prefix is evicted first, also with the
  adapter's ``schedkit`` radix-cache backend in place and no eviction policy.

``test_engine.py`` has the same seams with policies that decide otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_util import engine, prompt

CONFIGS = [None, "fcfs", "priority"]


def _ids(config: str | None) -> str:
    return config or "no-config"


# -- retraction --------------------------------------------------------------------------


def _retractions(model_dir: Path, policy: str | None) -> list[int]:
    """Four requests decode together (prompts of 40, 36, 32 and 12 tokens, arriving in
    that order, equal priority); SGLang's test switch retracts one decoding request
    every third batch. Returns each request's number of retractions."""
    lengths = [40, 36, 32, 12]
    params = {"max_new_tokens": 24, "ignore_eos": True}
    retract = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "3"}
    with engine(model_dir, policy, extra_env=retract) as llm:
        outputs = llm.generate(
            input_ids=[prompt(10 + i, n) for i, n in enumerate(lengths)], sampling_params=params
        )
    assert all(o["meta_info"]["completion_tokens"] == 24 for o in outputs)
    return [int(o["meta_info"]["num_retractions"]) for o in outputs]


@pytest.mark.parametrize("policy", CONFIGS, ids=_ids)
def test_retraction_order(model_dir: Path, policy: str | None) -> None:
    retracted = _retractions(model_dir, policy)
    assert sum(retracted) > 0
    if policy == "priority":  # equal priorities: the newest goes, the 12-token prompt
        assert retracted[:3] == [0, 0, 0], retracted
    else:  # SGLang's rule: the longest prompt goes first, the shortest never
        assert retracted[0] > 0 and retracted[3] == 0, retracted


# -- priority preemption -----------------------------------------------------------------


def _preempted(model_dir: Path, policy: str | None) -> dict[str, int]:
    """Priorities 30 ("worst", first) and 20 ("better", second) fill the batch of two;
    a priority-0 request arrives. Both running ones are preemptible (threshold 10).
    Returns num_retractions by name. Each long request is streamed and the next sent
    once it produced a token (it runs), so the urgent one finds both running."""
    long = {"max_new_tokens": 300, "ignore_eos": True}

    async def run(llm: Any) -> list[Any]:
        streams = []
        for i, priority in enumerate((30, 20)):
            stream = await llm.async_generate(
                input_ids=prompt(20 + i, 16), sampling_params=long, priority=priority, stream=True
            )
            streams.append((stream, await stream.__anext__()))
        urgent = {"max_new_tokens": 2}
        done = await llm.async_generate(
            input_ids=prompt(22, 16), sampling_params=urgent, priority=0
        )
        outputs = []
        for stream, last in streams:
            async for out in stream:
                last = out
            outputs.append(last)
        return [*outputs, done]

    with engine(
        model_dir,
        policy,
        max_running_requests=2,
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=True,
    ) as llm:
        outputs = llm.loop.run_until_complete(run(llm))
    names = ("worst", "better", "urgent")
    return {n: int(o["meta_info"]["num_retractions"]) for n, o in zip(names, outputs, strict=True)}


@pytest.mark.parametrize("policy", CONFIGS, ids=_ids)
def test_priority_preemption_takes_the_worst_running_priority(
    model_dir: Path, policy: str | None
) -> None:
    # Not the newest ("better"): the worst priority goes, though it arrived first.
    assert _preempted(model_dir, policy) == {"worst": 1, "better": 0, "urgent": 0}


# -- radix eviction ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", CONFIGS, ids=_ids)
def test_radix_eviction_takes_the_least_recently_used_prefix(
    model_dir: Path, policy: str | None
) -> None:
    """Prompts A, B, A again, then C fill the pool (900 tokens); A's next turn needs
    room (its own prefix is locked by its match), and the least recently used leaf goes:
    B, though A was cached first (A was used since) and C last. So C is still cached
    after, and B is not. With a config the adapter's ``schedkit`` radix-cache backend is
    in place. One output token each: only prompts enter the tree."""
    a, b, c = (prompt(30 + i, 300) for i in range(3))
    params = {"max_new_tokens": 1}
    backend = {} if policy is None else {"radix_cache_backend": "schedkit"}
    with engine(model_dir, policy, max_total_tokens=900, **backend) as llm:
        cached = [
            int(llm.generate(input_ids=ids, sampling_params=params)["meta_info"]["cached_tokens"])
            for ids in (a, b, a, c, a, c, b)
        ]
    assert cached[2] >= 256, cached  # A hit: A's prefix counts as used after B's
    assert cached[4:] == [cached[2], cached[2], 0], cached  # A and C kept, B evicted
