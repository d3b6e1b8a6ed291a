"""The LMDeploy adapter's parts: stock equivalence, the version check, activation from the
environment, the batch budget, request metadata and trust, prefix blocks, launch warnings."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

import pytest
from schedkit import BatchBudget, Policy, PolicyFacade, PolicyRegistry, hookimpl
from schedkit.sim.config import SimConfig
from schedkit.testing.contract import SCENARIOS, ContractRecorder, Scenario, check_outcome
from schedkit.trust import TrustConfig
from schedkit.workload import TraceRequest

from schedkit_lmdeploy import compat, patches
from schedkit_lmdeploy.harness.contract import run_lmdeploy
from schedkit_lmdeploy.harness.modelless import build_scheduler

FINGERPRINT = """
import json, sys
from schedkit.testing.contract import SCENARIOS
from schedkit_lmdeploy import patches
from schedkit_lmdeploy.harness.contract import run_lmdeploy
out = {}
for s in SCENARIOS:
    o = run_lmdeploy(s, None)
    out[s.name] = [o.steps, o.preempted, o.admitted, o.output_tokens]
assert not patches.installed(), "a stock run patched LMDeploy"
json.dump(out, sys.stdout)
"""


# LMDeploy stamps a block's access time in whole seconds (perf_counter in an int64
# array) and breaks ties between least recently used leaves by id(node): where blocks
# are evicted (shared-prefix), two stock runs may evict different leaves of one second.
EVICTING = {"shared-prefix"}


def fingerprint(outcome: Any) -> list[Any]:
    return json.loads(
        json.dumps([outcome.steps, outcome.preempted, outcome.admitted, outcome.output_tokens])
    )


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDKIT_")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )


# -- stock equivalence -------------------------------------------------------------------


def test_patched_lmdeploy_without_a_policy_schedules_as_stock_lmdeploy() -> None:
    """Unpatched LMDeploy (a fresh process), patched classes without a runtime, and a
    runtime with fcfs (no decision hook) schedule every scenario identically (where
    LMDeploy evicts, each request gets the same output: see ``EVICTING``)."""
    done = run_python(FINGERPRINT)
    assert done.returncode == 0, done.stderr[-2000:]
    stock = json.loads(done.stdout)
    registry = PolicyRegistry.discover()
    run_lmdeploy(SCENARIOS[0], [("fcfs", registry.load("fcfs")())])  # patches the classes
    assert patches.installed()
    for scenario in SCENARIOS:
        inert = fingerprint(run_lmdeploy(scenario, None))
        fcfs = fingerprint(run_lmdeploy(scenario, [("fcfs", registry.load("fcfs")())]))
        if scenario.name in EVICTING:  # LRU ties: compare what each request got
            inert, fcfs, want = inert[3], fcfs[3], stock[scenario.name][3]
        else:
            want = stock[scenario.name]
        assert inert == want, scenario.name
        assert fcfs == want, scenario.name


# -- versions and activation --------------------------------------------------------------


def test_an_unsupported_lmdeploy_is_refused_with_the_versions_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert compat.installed_version() == "0.18.0"
    for version in ("0.17.1", "0.19.0", "1.0"):
        with pytest.raises(compat.UnsupportedLmdeployError) as info:
            compat.check_version(version)
        message = str(info.value)
        assert version in message and "0.18" in message and "pip install" in message
    monkeypatch.setattr(compat, "installed_version", lambda: "0.17.1")
    scheduler = build_scheduler(16, 32, 4, 256)
    with pytest.raises(compat.UnsupportedLmdeployError):
        patches.install(scheduler, PolicyFacade([]))
    assert not hasattr(scheduler, "schedkit")


ACTIVATE = """
import json
from schedkit_lmdeploy import patches
from schedkit_lmdeploy.harness.modelless import build_scheduler
active = patches.activate_from_environ()
scheduler = build_scheduler(16, 32, 4, 256)
runtime = getattr(scheduler, "schedkit", None)
print(json.dumps({"active": active, "patched": patches.installed(),
                  "policy": None if runtime is None else runtime.facade.label}))
"""


def test_the_environment_selects_the_policy_in_every_scheduler_built_after() -> None:
    done = run_python(ACTIVATE, {"SCHEDKIT_POLICY": "priority+lfu"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "active": True, "patched": True, "policy": "priority+lfu",
    }  # fmt: skip


def test_without_a_config_nothing_is_patched() -> None:
    done = run_python(ACTIVATE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "active": False, "patched": False, "policy": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SCHEDKIT_POLICY": "no-such-policy"}, "no-such-policy"),
        ({"SCHEDKIT_POLICY": "priority", "SCHEDKIT_OPTIONS": "{not json"}, "SCHEDKIT_OPTIONS"),
        ({"SCHEDKIT_CONFIG": "/nonexistent/schedkit.toml"}, "SCHEDKIT_CONFIG"),
    ],
)
def test_a_bad_config_fails_at_activation_naming_what_is_wrong(
    env: dict[str, str], named: str
) -> None:
    done = run_python(ACTIVATE, env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert named in last, last


# -- the batch budget ----------------------------------------------------------------------


class Tight(Policy):
    """Halves the prefill tokens and runs at most two requests."""

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget:
        return BatchBudget(token_budget=default.token_budget // 2, max_running=2)


BUDGET = Scenario(
    "budget",
    (
        *(TraceRequest(f"b{i}", 0.0, 60 + 30 * (i % 3), 6) for i in range(8)),
        TraceRequest("long", 0.0, 700, 4),
    ),
    SimConfig(num_blocks=200, block_size=32, max_num_seqs=6, max_num_batched_tokens=256),
)


def test_plan_batch_caps_prefill_tokens_and_running_requests() -> None:
    stock = run_lmdeploy(BUDGET, None)
    tight = run_lmdeploy(BUDGET, [("tight", Tight())])
    check_outcome(BUDGET, tight)
    short = {f"b{i}" for i in range(8)}

    def widest(outcome: Any) -> int:  # most short prompts prefilled in one batch
        return max(sum(1 for r in step if r in short and step[r] > 1) for step in outcome.steps)

    def most_running(outcome: Any) -> int:
        return max(len(step) for step in outcome.steps)

    assert most_running(stock) > 2 and most_running(tight) <= 2
    assert widest(stock) > 1
    for step in tight.steps:  # later prefills of a batch fit 128 tokens
        prefills = [n for r, n in step.items() if r in short and n > 1]
        assert len(prefills) <= 1 or sum(prefills) <= 128, step
    # LMDeploy's own chunk size stands: the 700-token prompt goes in chunks of 256
    chunks = [step["long"] for step in tight.steps if step.get("long", 0) > 1]
    assert chunks == [256, 256, 188], chunks


def test_the_policy_budget_counts_a_prompt_after_its_prefix_match() -> None:
    """b1 shares 3 of its 4 blocks with b0: after b0 ran, b1 fits a 64-token budget next to
    another prompt only because its cached prefix is not computed, as LMDeploy counts."""
    shared = (1, 2, 3)
    requests = (
        TraceRequest("b0", 0.0, 128, 2, hash_ids=(*shared, 10)),
        TraceRequest("x", 0.5, 40, 2, hash_ids=(20, 21)),
        TraceRequest("b1", 0.5, 128, 2, hash_ids=(*shared, 11)),
    )
    config = SimConfig(num_blocks=64, block_size=32, max_num_seqs=4, max_num_batched_tokens=256,
                       hash_block_tokens=32)  # fmt: skip

    class Budget(Policy):
        @hookimpl
        def plan_batch(self, default: BatchBudget) -> BatchBudget:
            return BatchBudget(token_budget=80, max_running=default.max_running)

    outcome = run_lmdeploy(Scenario("match", requests, config), [("budget", Budget())])
    together = [step for step in outcome.steps if {"x", "b1"} <= set(step)]
    assert together and together[0]["b1"] == 32, outcome.steps  # 96 cached, 32 computed


def test_a_finished_sequence_in_a_prefetched_batch_is_not_reported() -> None:
    """LMDeploy forms step N+1 before step N's outputs arrive: a sequence that finished on
    step N can be in it; its forward skips it, and so does the step report."""
    recorder = ContractRecorder()
    scheduler = build_scheduler(64, 32, 4, 256)
    runtime = patches.install(scheduler, PolicyFacade([("rec", recorder)]))
    import numpy as np

    seqs = [
        scheduler.add_session(i).add_sequence(
            np.arange(40) + 100 * i, schedkit_meta={"request_id": f"r{i}"}
        )
        for i in range(2)
    ]
    from lmdeploy.pytorch.messages import UpdateTokenMode

    batch = list(scheduler.schedule(is_prefill=True, prealloc_size=16).running)
    scheduler.activate_seqs(batch)  # step 1: both prompts
    for seq in seqs:  # step 1's outputs arrive after step 2 was formed from the same batch
        seq.update_token_ids(np.array([7]), mode=UpdateTokenMode.PREFILL)
    seqs[1].state.finish()  # r1 had one token to generate
    scheduler.activate_seqs(batch)  # step 2: r0 decodes, r1 is skipped
    runtime.report_open()
    assert dict(recorder.reported) == {"r0": 41, "r1": 40}  # r1: its prompt only


# -- requests, trust, prefix blocks ---------------------------------------------------------


def test_metadata_reaches_the_view_within_the_trust_bounds() -> None:
    scheduler = build_scheduler(64, 32, 4, 256)
    trust = TrustConfig(priority_range=(-10, 10), tenants=["gold"], max_tenant_len=8)
    runtime = patches.install(scheduler, PolicyFacade([]), trust)
    import numpy as np

    session = scheduler.add_session(7)
    meta = {"request_id": "req-7", "tenant": "gold", "priority": 500, "slo_ttft_ms": 250}
    view = runtime.view(session.add_sequence(np.arange(40), schedkit_meta=meta))
    assert (view.request_id, view.tenant, view.priority, view.slo_ttft_ms) == (
        "req-7", "gold", 10, 250.0,
    )  # fmt: skip
    assert (view.num_prompt_tokens, view.num_output_tokens, view.max_tokens) == (40, 0, 512)
    other = runtime.view(
        scheduler.add_session(8).add_sequence(np.arange(9), schedkit_meta={"tenant": "x" * 99})
    )
    assert other.tenant == trust.default_tenant and other.request_id == "session-8"
    with pytest.raises(AttributeError):
        view.priority = 0  # type: ignore[misc]


def test_block_hashes_name_the_cached_blocks_a_request_will_reuse() -> None:
    """After p0 ran, a waiting request with the same 3-block prefix lists those blocks,
    by the ids eviction candidates carry."""
    seen: dict[str, tuple[int, ...]] = {}

    class Watch(Policy):
        @hookimpl
        def order_waiting(self, waiting: Any) -> None:
            for request in waiting:
                seen[request.request_id] = tuple(request.block_hashes)

    shared = (1, 2, 3)
    requests = (
        TraceRequest("p0", 0.0, 128, 2, hash_ids=(*shared, 10)),
        TraceRequest("p1", 0.5, 128, 2, hash_ids=(*shared, 11)),
        TraceRequest("p2", 0.5, 128, 2, hash_ids=(4, 5, 6, 12)),
    )
    config = SimConfig(num_blocks=64, block_size=32, max_num_seqs=1, max_num_batched_tokens=512,
                       hash_block_tokens=32)  # fmt: skip
    outcome = run_lmdeploy(Scenario("hashes", requests, config), [("watch", Watch())])
    assert outcome.finished == dict.fromkeys(["p0", "p1", "p2"], "length")
    assert len(seen["p1"]) == 3 and seen["p2"] == ()  # p0's full blocks; p2 shares none


# -- launch warnings ----------------------------------------------------------------------


def test_install_warns_about_hooks_lmdeploy_honours_in_part(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = build_scheduler(16, 32, 4, 256)
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        patches.install(scheduler, PolicyFacade([("tight", Tight())]))
    text = caplog.text
    assert "plan_batch" in text and "lmdeploy" in text and "capability matrix" in text


def test_schedkit_policies_lists_every_policy_in_the_lmdeploy_environment() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies"], capture_output=True, text=True,
        timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("fcfs", "priority", "lfu", "prefix-aware", "slo", "vtc"):
        assert name in done.stdout, name


def test_the_scheduler_patches_load_no_bench_simulator_or_numpy_of_ours() -> None:
    """Issue #36: what LMDeploy's engine process imports of schedkit is the kit, the core
    and the adapter's runtime, not the adapter's harness (timed in
    benchmarks/speed/README.md)."""
    from schedkit.testing.imports import HARNESS_PACKAGES, loaded_by

    loaded = loaded_by("lmdeploy.pytorch.paging.scheduler", "schedkit_lmdeploy.patches:install")
    modules = loaded["modules"]
    assert isinstance(modules, list) and "schedkit_lmdeploy.runtime" in modules
    harness = [m for m in modules if m.startswith((*HARNESS_PACKAGES, "schedkit_lmdeploy.harness"))]
    assert harness == [], harness
    assert not any(m == "numpy" or m.startswith("numpy.") for m in modules)
