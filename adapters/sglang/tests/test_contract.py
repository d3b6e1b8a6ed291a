"""The cross-engine contract suite on the real SGLang engine (CPU, tiny random Llama).

Every scenario of ``schedkit.testing.contract.SCENARIOS`` runs with the default policy,
and each shipped policy on the scenario that exercises it, in SGLang's normal loop and
(for a subset) its overlap loop (``event_loop_overlap``, the GPU default), through
``schedkit_sglang.harness.contract.run_sglang``. Each run must keep the contract
(``check_outcome``: every request ends once with its full output or its rejection, each
token SGLang scheduled is reported to the policies exactly once, every arrival and
finish is observed once, no KV page leaks), and must decide as the simulator does on
what the capability matrix calls full on SGLang: the same rejections with the same
reasons (``admit_request``), the same finish reasons and output tokens
(``on_request_finished``), and the same admission order (``order_waiting``; the driver
lets each request in at its arrival step counted in SGLang's batches, so every scenario
compares, not only the pure ordering ones). A faulty policy put first
(``contract-flaky``, the suite's ``Flaky``) changes none of that.

What differs from the simulator, and why (none of it is compared):

- Batches (``Outcome.steps``, ``batches_comparable=False``): SGLang runs prefill and
  decode in separate batches (the simulator mixes them in one step), caps a prefill batch
  with one chunk size rather than a chunk per request, and so runs a different number of
  steps (e.g. kv-pressure: 81 batches, 79 simulated steps). Engine behaviour, not a hook.
- Preemptions: SGLang's paged allocator reserves a page per admitted request, so it runs
  fewer requests at once where KV is short. kv-pressure: the simulator prefills all four
  prompts into the 8 blocks and preempts two at the next step; SGLang admits three and,
  when its decode batch cannot grow, retracts one (k2 under fcfs and lcf; k3 under
  priority, whose k0 is still waiting). shared-prefix: the simulator preempts p6 and p7,
  SGLang retracts nothing. The victim a policy names is honoured (``select_victims`` is
  partial in the matrix: SGLang retracts for the whole decode batch, ``needing`` is the
  request it would keep longest); the difference comes from who is running, which SGLang's
  admission decides. So each victim call SGLang shows the hook as the simulator shows it
  (the same needing request and running requests, recorded through the facade's
  ``watch``) must preempt as the simulator did (``victims_where_shown_alike``, the rule
  ``schedkit contract`` applies to SGLang); the others are not compared. victims: both
  retract v3, then v2 (the computed tokens differ: the simulator decodes the running
  requests in the step that prefills a newcomer).
- The clock: SGLang runs on the wall clock; the driver gives the policies the
  simulator's (``step_s`` per batch SGLang ran, arrivals at the scenario's times), so
  time-based decisions (slo's predicted TTFT and deadlines, sjf's aging) see the waits
  the simulator sees. With the wall clock, slo's predicted TTFT for l0 (3.2 ms of
  prefill) read 4 ms instead of 3 ms when the scheduler was slow to admit it.
  SGLang runs more batches than the simulator runs steps, so late readings run ahead.

Where that makes an order differ (not among these cases; ``schedkit contract`` shows it):
vtc on staggered, both loops, admits s7 before s4: it learns from step reports, and
SGLang's prefill batch takes its whole 128-token chunk (the simulator's mixed step gives
the decodes theirs), so when s4 and s7 compete the ledger has charged tenant b 32 tokens
less (s5's last chunk is in that very batch). A clock-reading order (the contract site's
ratio-demo) on slo-mix in the overlap loop: the loop frees a finished request's slot one batch
later, so l2 and l4 compete at 0.06 s, not 0.05 s (the simulator: 0.04 s), and l4 wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from schedkit import PolicyFacade, PolicyRegistry
from schedkit.testing.contract import SCENARIOS, Flaky, Outcome, check_outcome, run_sim
from schedkit.testing.contract_run import Case, victims_where_shown_alike

from schedkit_sglang.harness.contract import FLAKY, run_sglang

# (scenario, policies, overlap loop): every scenario with fcfs; every shipped policy on
# the scenario that exercises it; a faulty policy first; the overlap loop for
# fcfs (KV pressure, staggered arrivals) and an ordering and an admitting policy. One
# engine start per case (~7-25 s here).
CASES: list[tuple[str, tuple[str, ...], bool]] = [
    *((s.name, ("fcfs",), False) for s in SCENARIOS),
    ("arrival-order", ("priority",), False),
    ("arrival-order", ("sjf",), False),
    ("arrival-order", ("shortest-prompt",), False),
    ("arrival-order", ("priority-aging",), False),
    ("kv-pressure", ("lcf",), False),
    ("kv-pressure", ("priority",), False),
    ("victims", ("lcf",), False),
    ("victims", ("priority",), False),
    ("shared-prefix", ("prefix-aware",), False),
    ("shared-prefix", ("prefix-aware-queued",), False),
    ("shared-prefix", ("lfu",), False),
    ("shared-prefix", ("slru",), False),
    ("two-tenant", ("vtc",), False),
    ("slo-mix", ("slo",), False),
    ("slo-mix", ("fairbatching",), False),
    ("kv-pressure", (FLAKY, "priority"), False),
    ("kv-pressure", ("fcfs",), True),
    ("staggered", ("fcfs",), True),
    ("arrival-order", ("priority",), True),
    ("slo-mix", ("slo",), True),
]


def _id(case: tuple[str, tuple[str, ...], bool]) -> str:
    scenario, policies, overlap = case
    return f"{scenario}-{'+'.join(policies)}-{'overlap' if overlap else 'normal'}"


def _sim(scenario: Any, policies: tuple[str, ...]) -> Outcome:
    registry = PolicyRegistry.discover()
    chosen: list[Any] = [
        ("flaky", Flaky()) if name == FLAKY else (name, registry.load(name)()) for name in policies
    ]
    return run_sim(scenario, chosen)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_sglang_keeps_the_contract_and_decides_as_the_simulator(
    model_dir: Path, case: tuple[str, tuple[str, ...], bool]
) -> None:
    name, policies, overlap = case
    scenario = next(s for s in SCENARIOS if s.name == name)
    outcome = run_sglang(scenario, policies, model_dir, overlap=overlap)
    check_outcome(scenario, outcome)
    sim = _sim(scenario, tuple(p for p in policies if p != FLAKY))
    where = f"{_id(case)} vs sim"
    assert outcome.rejected == sim.rejected, f"{where}: rejections"
    assert outcome.finished == sim.finished, f"{where}: finish reasons"
    assert outcome.output_tokens == sim.output_tokens, f"{where}: output tokens"
    assert outcome.admitted == sim.admitted, f"{where}: admission order"
    victims_where_shown_alike(Case(scenario, sim, outcome, frozenset()))
    decides = PolicyFacade.from_config({"policy": [p for p in policies if p != FLAKY]})
    if name in ("kv-pressure", "victims") and decides.has_victims:
        # the victim hook was asked, and the recorder saw what it was shown
        assert outcome.recorder.victim_calls, outcome.preempted
    if FLAKY in policies:
        assert outcome.policy_errors > 0
    else:
        assert outcome.policy_errors == 0
    if name == "kv-pressure":  # SGLang retracts too: the victim hooks were asked
        assert any(outcome.preempted), outcome.preempted
    if name == "shared-prefix":  # engine.cached_tokens: SGLang's radix-tree match
        cached = outcome.recorder.cached
        assert set(cached.values()) <= {0, 32} and 32 in cached.values(), cached
    if name == "slo-mix" and "slo" in policies:
        assert outcome.rejected, "slo rejects the tight targets"
