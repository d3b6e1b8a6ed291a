"""Chaos on the real SGLang engine (issue #12 part 6): a seeded faulty policy in front of
real ones.

``test-chaos`` (``site/schedkit_sglang_chaos.py``: the contract suite's ``Flaky``, which
raises on 10% of every decision hook's calls and answers nonsense on another 10%,
tallying what it did) runs first in SGLang's scheduler, then ``test-reject-long`` (which
rejects every tenth prompt, the long ones) and ``priority``. Through ``run_sglang`` (the
contract suite's driver: arrivals held to their step, every batch recorded, the KV pool
read back once the engine is idle), 320 requests with shared prefixes and a KV cache too
small for the running batch must all finish with their whole output or be rejected with
a reason, leave no KV page referenced, and have every raise and every refused answer
counted as a policy fault, while SGLang retracts decoding requests and evicts from its
radix cache.

A fault falls back to the next policy, so the faulty run must decide as the clean one
(the same policies without ``test-chaos``) does: the same rejections, finish reasons and
output tokens, and, since the engine is deterministic here, the same batches and
victims. It is: the driver lets each request in at its arrival step counted in SGLang's
batches, and memory, not time, decides admission and retraction (greedy sampling,
``ignore_eos``, fixed output lengths).

Run with ``-s`` for the figures (``benchmarks/engines/chaos-sglang.md``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from schedkit.sim.config import SimConfig
from schedkit.testing.contract import Outcome, Scenario, check_outcome
from schedkit.workload import TraceRequest

from schedkit_sglang.harness.contract import run_sglang

CHAOS = "test-chaos"
SEED = 7
FAULT_RATE = 0.1
REQUESTS = 320
BLOCK = 32  # tokens per KV page and per prefix hash
LONG = 160  # every tenth prompt, longer than test-reject-long lets in
POLICIES = [CHAOS, "test-reject-long", "priority"]
# Hooks called hundreds of times here; select_victims is asked once per retraction.
BUSY_HOOKS = {"admit_request", "order_waiting", "plan_batch", "select_evictions"}


def _scenario() -> Scenario:
    """Four arrivals a step; prompts of 2-3 pages (every tenth of 5) whose first page is
    one of 4 shared prefixes; 32-48 output tokens; priorities 0-2. 16 requests may run,
    but 32 pages (1,024 tokens) hold fewer once they decode: SGLang admits prompts that
    fit, runs out of pages decoding them and retracts, and the prefixes of finished
    requests fill the cache and are evicted."""
    requests = tuple(
        TraceRequest(
            f"r{i}",
            arrival_s=0.01 * (i // 4),
            prompt_tokens=LONG if i % 10 == 9 else (64, 80, 96)[i % 3],
            output_tokens=32 + 8 * (i % 5 // 2),
            priority=i % 3,
            hash_ids=(i % 4,),
        )
        for i in range(REQUESTS)
    )
    config = SimConfig(
        num_blocks=32,
        block_size=BLOCK,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        hash_block_tokens=BLOCK,
    )
    return Scenario("chaos", requests, config, what="a faulty policy under KV pressure")


SCENARIO = _scenario()


@dataclass
class Tally:
    """What ``test-chaos`` saw in SGLang's scheduler (its ``tally`` file)."""

    answers: Counter[tuple[str, str]] = field(default_factory=Counter)  # (hook, what it did)
    evictions: list[int] = field(default_factory=list)  # pages SGLang had to free, each
    cached: dict[str, int] = field(default_factory=dict)  # prompt tokens found in the cache
    retractions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Tally:
        tally = cls()
        for kind, *rest in (line.split() for line in path.read_text().splitlines()):
            if kind == "evict":
                tally.evictions.append(int(rest[0]))
            elif kind == "finished":
                rid, _, cached, retractions = rest
                tally.cached[rid] = int(cached)
                tally.retractions[rid] = int(retractions)
            else:
                tally.answers[kind, rest[0]] += 1
        return tally

    def count(self, what: str) -> int:
        return sum(n for (_, did), n in self.answers.items() if did == what)


@pytest.fixture(scope="module")
def runs(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The faulty run and the clean one, once for the module (an engine start each)."""
    path = tmp_path_factory.mktemp("chaos") / "tally.txt"
    reject = {"test-reject-long": {"max_prompt": LONG - 1}}
    options = {CHAOS: {"seed": SEED, "fault_rate": FAULT_RATE, "tally": str(path)}, **reject}
    started = time.monotonic()
    chaos = run_sglang(SCENARIO, POLICIES, model_dir, overlap=False, options=options)
    chaos_s = time.monotonic() - started
    started = time.monotonic()
    clean = run_sglang(SCENARIO, POLICIES[1:], model_dir, overlap=False, options=reject)
    clean_s = time.monotonic() - started
    tally = Tally.read(path)
    return {"chaos": chaos, "clean": clean, "tally": tally, "wall_s": (chaos_s, clean_s)}


def _retracted(outcome: Outcome) -> int:
    return sum(len(step) for step in outcome.preempted)


def test_a_faulty_policy_loses_nothing_under_kv_pressure(runs: dict[str, Any]) -> None:
    chaos: Outcome = runs["chaos"]
    tally: Tally = runs["tally"]
    raised, refused = tally.count("raise"), tally.count("nonsense")
    print(
        f"\nchaos on SGLang: {REQUESTS} requests, {len(chaos.steps)} batches,"
        f" {runs['wall_s'][0]:.0f} s (clean run {runs['wall_s'][1]:.0f} s, engine start"
        f" included); {_retracted(chaos)} retracted,"
        f" {len(tally.evictions)} evictions ({sum(tally.evictions)} pages to free),"
        f" {sum(tally.cached.values())} prompt tokens from the cache;"
        f" faults: {raised} raised, {refused} nonsense, {chaos.policy_errors} counted;"
        f" {len(chaos.rejected)} rejected (e.g. {next(iter(chaos.rejected.values()), '')!r}),"
        f" {chaos.blocks_leaked} pages leaked"
        f"\nby hook: {dict(sorted(tally.answers.items()))}"
    )
    check_outcome(SCENARIO, chaos)  # every request ended once, tokens reported, no leak
    long = {r.request_id for r in SCENARIO.requests if r.prompt_tokens == LONG}
    assert set(chaos.rejected) == long
    assert all(chaos.rejected.values()), chaos.rejected  # a rejection names its reason
    assert set(chaos.finished.values()) == {"length", "rejected"}
    assert chaos.blocks_leaked == 0
    # Pressure and sharing: SGLang retracted decoding requests, evicted cached prefixes
    # and found prompts in its cache.
    assert len(tally.cached) == REQUESTS  # every request seen leaving by the faulty policy
    assert _retracted(chaos) > 10, chaos.preempted
    assert sum(tally.retractions.values()) == _retracted(chaos)
    assert len(tally.evictions) > 10
    assert sum(tally.cached.values()) > 0
    # Every decision hook was called and faulted; every fault was counted, and nothing
    # else: the facade refuses each of Flaky's nonsense answers.
    assert {hook for hook, _ in tally.answers} == BUSY_HOOKS | {"select_victims"}
    assert {hook for hook, did in tally.answers if did == "raise"} >= BUSY_HOOKS
    assert raised > 100
    assert raised <= chaos.policy_errors <= 2.5 * raised
    assert chaos.policy_errors == raised + refused


def test_a_faulty_policy_changes_no_decision(runs: dict[str, Any]) -> None:
    chaos: Outcome = runs["chaos"]
    clean: Outcome = runs["clean"]
    check_outcome(SCENARIO, clean)
    assert clean.policy_errors == 0
    assert chaos.rejected == clean.rejected
    assert chaos.finished == clean.finished
    assert chaos.output_tokens == clean.output_tokens
    assert chaos.admitted == clean.admitted, "admission order"
    assert chaos.preempted == clean.preempted, "victims"
    assert chaos.steps == clean.steps, "batches"
