"""The KV offload tier's evictions come from the schedkit policies (issue #39 item 5).

vLLM's ``OffloadingConnector`` keeps KV chunks in host memory, on the scheduler side in a
``CPUOffloadingManager`` whose ``CachePolicy`` is named in the connector's extra config;
``schedkit_vllm.offload.SchedkitCachePolicy`` asks the scheduler's policies, with the GPU
tier's meaning (``select_evictions``/``eviction_key``; candidates least recently used
first, within the eviction window). Tested here, model-less, on the CPU, with vLLM's real
classes:

- vLLM's own ``CPUOffloadingManager`` driven through ``lookup``, ``prepare_load``/
  ``complete_load``, ``prepare_store``/``complete_store`` and ``on_request_finished``
  with real ``OffloadKey``s (a request's own block hashes) and ``ReqContext``s carrying
  the chunks' positions, as the connector's scheduler side calls them;
- the whole connector's scheduler side (``OffloadingConnectorScheduler``) inside the
  model-less scheduler (``harness.modelless.build_scheduler(kv_transfer=...)``), with a
  stand-in for the workers that reports every transfer job of a step complete in that
  step's ``kv_connector_output`` (``worker_output``).

What cannot run model-less on a CPU: the worker side, which copies KV between the GPU's
blocks and host memory (``OffloadingConnectorWorker``/``CPUOffloadingWorker``; vLLM's
``CPUOffloadingSpec.get_worker`` refuses every platform but CUDA-alike and XPU, and this
machine has no GPU). So no KV bytes move, transfers never take time, fail or complete
out of step, and with tensor parallelism each job would need every worker's report;
what is checked is every decision the scheduler side takes, which is where the policy
acts. vLLM 0.32, 0.33 and 0.34 all ship the CPU tier's policies
(``vllm.v1.kv_offload.cpu.policies``); a release without them skips this module.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import vllm
from conftest import BLOCK_SIZE, make_request
from schedkit import BlockView, EngineView, Policy, PolicyFacade, PolicyOptions, hookimpl
from schedkit.errors import PolicyConfigError
from schedkit.views import EngineState

try:
    from vllm.v1.kv_offload.cpu.policies.base import CachePolicy  # noqa: F401
except ImportError:  # pragma: no cover - every supported release has it
    pytest.skip(
        f"vLLM {vllm.__version__} has no CPU offload tier CachePolicy"
        " (vllm.v1.kv_offload.cpu.policies)",
        allow_module_level=True,
    )

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata,
)
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.outputs import KVConnectorOutput

from schedkit_vllm import AsyncScheduler, offload
from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output
from schedkit_vllm.offload import SchedkitCachePolicy
from schedkit_vllm.views import hash_int

NAME, MODULE = "SchedkitCachePolicy", "schedkit_vllm.offload"


# -- policies of the tests ------------------------------------------------------------


class NoOpinion(Policy):
    """Answers None, recording every eviction's candidates and count."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.calls: list[tuple[list[BlockView], int]] = []

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> None:
        self.calls.append((list(candidates), num_blocks))


class Unkeyed(Policy):
    """A key hook with no key for any chunk: the facade ranks the candidates in the
    order offered, and the tier evicts through the policy's path."""

    @hookimpl
    def eviction_key(self, block: BlockView, engine: EngineView) -> None:
        return None


class NewestFirst(Policy):
    """Evicts the most recently used candidates first (LRU's opposite)."""

    @hookimpl
    def select_evictions(self, candidates: Sequence[BlockView], num_blocks: int) -> list[BlockView]:
        return list(reversed(candidates))[:num_blocks]


# -- a CPU tier driven as the connector's scheduler side drives it ---------------------


def tier(
    num_chunks: int, facade: PolicyFacade | None = None, engine: EngineView | None = None
) -> Any:
    """vLLM's manager with ``SchedkitCachePolicy`` bound to ``facade`` (unbound: LRU), or
    with vLLM's own LRU when ``facade`` is None and ``engine`` is None."""
    if facade is None and engine is None:
        return CPUOffloadingManager(num_chunks=num_chunks, cache_policy="lru")
    with offload.collecting():  # what a schedkit scheduler's constructor opens
        manager = CPUOffloadingManager(
            num_chunks=num_chunks, cache_policy=NAME, cache_policy_module_path=MODULE
        )
    policy = manager._policy
    assert isinstance(policy, SchedkitCachePolicy)
    if facade is not None:
        policy.bind(facade, engine or EngineState(1000, BLOCK_SIZE), hash_block_size=BLOCK_SIZE)
    return manager


def facade_of(*policies: Policy) -> PolicyFacade:
    return PolicyFacade([(type(p).__name__, p) for p in policies])


class Request:
    """A request's chunks: one per full block, keyed by its block hash (the offload key
    of a chunk of one block), at the end-token positions vLLM's scheduler records."""

    def __init__(self, name: str, prompt: list[int]) -> None:
        self.request = make_request(name, prompt)
        self.keys = [make_offload_key(h, 0) for h in self.request.block_hashes]
        self.context = ReqContext(req_id=name)
        for i, key in enumerate(self.keys):
            self.context.set_offload_key_position(key, (i + 1) * BLOCK_SIZE)


def prompt(conversation: int, chunks: int) -> list[int]:
    return [conversation * 97 + t for t in range(chunks * BLOCK_SIZE)]


def serve(manager: Any, request: Request, *, finish: bool = True) -> tuple[Any, ...]:
    """Load the request's leading chunks the tier holds, store the rest, finish it:
    (evicted keys or None when the store was refused, keys stored)."""
    keys, context = request.keys, request.context
    hits = 0
    while hits < len(keys) and manager.lookup(keys[hits], context) is LookupResult.HIT:
        hits += 1
    if hits:
        manager.prepare_load(keys[:hits], context)
        manager.complete_load(keys[:hits], context)
    out = manager.prepare_store(keys[hits:], context)
    if out is not None:
        manager.complete_store(out.keys_to_store, context)
    if finish:
        manager.on_request_finished(context)
    if out is None:
        return (None, ())
    return (tuple(out.evicted_keys), tuple(out.keys_to_store))


def resident(manager: Any) -> set[Any]:
    return set(manager._policy.chunks)


def workload(manager: Any, seed: int, steps: int = 120) -> list[Any]:
    """Requests over a few conversations with shared prefixes, some of whose loads
    stay pinned (in flight) across the next request's store: what each step evicted."""
    rng = random.Random(seed)
    log: list[Any] = []
    pinned: tuple[Any, Any] | None = None
    for i in range(steps):
        conversation = rng.randrange(6)
        request = Request(f"r{i}", prompt(conversation, rng.randrange(1, 7)))
        keys, context = request.keys, request.context
        hold = [k for k in keys[:2] if manager.lookup(k, context) is LookupResult.HIT]
        if hold and rng.random() < 0.3:  # a load still in flight during the next store
            manager.prepare_load(hold, context)
            if pinned is not None:
                manager.complete_load(*pinned)
            pinned = (hold, context)
        log.append(serve(manager, request))
    return log


# -- (a) no hook, no opinion: vLLM's LRU exactly -----------------------------------------


@pytest.mark.parametrize(
    "policies",
    [
        pytest.param((), id="no-eviction-hook"),
        pytest.param((NoOpinion,), id="select_evictions-None"),
        pytest.param((Unkeyed,), id="eviction_key-None"),
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_without_an_opinion_the_tier_evicts_as_vllms_lru(
    policies: tuple[type[Policy], ...], seed: int
) -> None:
    expected = workload(tier(6), seed)
    assert any(evicted for evicted, _ in expected)  # the tier was full, LRU chose
    assert any(evicted is None for evicted, _ in expected)  # and refused, all pinned
    manager = tier(6, facade_of(*(cls() for cls in policies)))
    assert workload(manager, seed) == expected
    policy = manager._policy  # vLLM's bookkeeping and the views name the same chunks
    assert set(policy._ranks) == set(policy.chunks) == set(policy.views)
    assert policy._evictable <= set(policy.chunks)


def test_an_unbound_policy_is_vllms_lru() -> None:
    assert workload(tier(6, engine=EngineState(0, BLOCK_SIZE)), 3) == workload(tier(6), 3)


# -- (b) the policy's answer decides --------------------------------------------------


def test_select_evictions_chooses_the_chunks_dropped() -> None:
    a, b, c = Request("a", prompt(1, 4)), Request("b", prompt(2, 4)), Request("c", prompt(3, 2))
    lru, newest = tier(8), tier(8, facade_of(NewestFirst()))
    for manager in (lru, newest):
        serve(manager, a)
        serve(manager, b)
    evicted, stored = serve(lru, c)
    assert set(evicted) == set(a.keys[2:]) and stored == tuple(c.keys)  # a's tail, LRU
    evicted, stored = serve(newest, c)
    assert set(evicted) == set(b.keys[:2]) and stored == tuple(c.keys)  # b's head
    assert resident(newest) == set(a.keys) | set(b.keys[2:]) | set(c.keys)
    assert newest._policy.num_evicted_by_policy == 2


def test_lfu_keeps_the_reused_chunks() -> None:
    a, a_again = Request("a", prompt(1, 4)), Request("a2", prompt(1, 4))
    b, c = Request("b", prompt(2, 4)), Request("c", prompt(3, 2))
    engine = EngineState(1000, BLOCK_SIZE)
    lru, lfu = tier(8), tier(8, PolicyFacade.from_config({"policy": ["lfu"]}), engine)
    for manager in (lru, lfu):
        for clock, request in enumerate((a, a_again, b, c)):
            engine.clock = float(clock)
            serve(manager, request)  # a2 loads a's four chunks: one hit each
    assert resident(lru) == set(a.keys[:2]) | set(b.keys) | set(c.keys)  # a's tail went
    assert resident(lfu) == set(a.keys) | set(b.keys[:2]) | set(c.keys)  # b: no hits


def test_prefix_aware_evicts_deep_chunks_before_older_heads() -> None:
    a, b, c = Request("a", prompt(1, 2)), Request("b", prompt(2, 4)), Request("c", prompt(3, 2))
    engine = EngineState(1000, BLOCK_SIZE)
    aware = PolicyFacade.from_config({"policy": ["prefix-aware"]})
    lru, keyed = tier(6), tier(6, aware, engine)
    for manager in (lru, keyed):
        for clock, request in enumerate((a, b, c)):
            engine.clock = float(clock)
            serve(manager, request)
    assert resident(lru) == set(b.keys) | set(c.keys)  # a, least recently used, went
    # no hits anywhere: b's depths 2 and 3 (depth class 2) go before a's depths 0 and 1
    assert resident(keyed) == set(a.keys) | set(b.keys[:2]) | set(c.keys)


def test_candidates_are_the_least_recent_evictable_unprotected_chunks() -> None:
    record = NoOpinion()
    manager = tier(8, facade_of(record))
    a, b = Request("a", prompt(1, 4)), Request("b", prompt(2, 4))
    serve(manager, a)
    serve(manager, b)
    manager.prepare_load(a.keys[:1], a.context)  # a load in flight: not evictable
    c = Request("c", prompt(3, 2))
    assert serve(manager, c)[0] is not None
    candidates, n = record.calls[-1]
    assert n == 2
    # vLLM's LRU order: a finished request's chunks tail first, a (pinned head aside), b
    lru_order = a.keys[:0:-1] + b.keys[::-1]
    assert [v.key for v in candidates] == lru_order
    # The window: max(window, 4 n) candidates, the least recent of them.
    manager._policy.eviction_window = 2
    left = [k for k in lru_order if k in resident(manager)]
    d = Request("d", prompt(4, 1))
    serve(manager, d)
    candidates, n = record.calls[-1]
    assert n == 1 and [v.key for v in candidates] == left[:4]
    # A store's own chunks are protected: d's chunk, offered again, is no candidate.
    manager._policy.eviction_window = 0  # every evictable chunk is a candidate
    e = Request("e", prompt(4, 1) + prompt(5, 1))
    assert e.keys[0] == d.keys[0]
    out = manager.prepare_store(e.keys, e.context)
    assert out is not None and out.keys_to_store == e.keys[1:]
    candidates, n = record.calls[-1]
    assert n == 1 and len(candidates) == 6 and d.keys[0] not in [v.key for v in candidates]


def test_evict_is_atomic_when_too_few_chunks_are_evictable() -> None:
    manager = tier(4, facade_of(NewestFirst()))
    a = Request("a", prompt(1, 4))
    serve(manager, a)
    manager.prepare_load(a.keys[:3], a.context)  # three of four pinned
    before = resident(manager)
    assert manager._policy.evict(2, set()) is None
    assert resident(manager) == before
    evicted = manager._policy.evict(1, set())
    assert [key for key, _ in evicted] == [a.keys[3]]
    assert manager._policy.evict(1, set()) is None  # the rest are being loaded


# -- (d) what a candidate says ----------------------------------------------------------


def test_candidates_carry_depth_hash_hits_and_access_time() -> None:
    record = NoOpinion()
    engine = EngineState(1000, BLOCK_SIZE)
    manager = tier(5, facade_of(record), engine)
    a = Request("a", prompt(1, 4))
    engine.clock = 1.0
    serve(manager, a)
    for clock, name in ((2.0, "a2"), (3.0, "a3")):  # two more requests load a's prefix
        engine.clock = clock
        serve(manager, Request(name, prompt(1, 2)))
    engine.clock = 4.0
    serve(manager, Request("b", prompt(2, 3)))  # two of a's chunks must go
    candidates, n = record.calls[-1]
    assert n == 2
    fields = {v.key: (v.depth, v.depth_class, v.num_hits, v.last_access) for v in candidates}
    assert fields[a.keys[0]] == (0, 0, 2, 3.0)  # loaded by a2 and a3, last at 3.0
    assert fields[a.keys[1]] == (1, 1, 2, 3.0)
    assert fields[a.keys[2]] == (2, 2, 0, 1.0)  # stored by a at 1.0, never reused
    assert fields[a.keys[3]] == (3, 2, 0, 1.0)
    hashes = [hash_int(h) for h in a.request.block_hashes]
    assert all(v.block_hash == hashes[v.depth] for v in candidates if v.key in a.keys)
    with pytest.raises(AttributeError):
        candidates[0].num_hits = 9  # type: ignore[misc]


# -- (c) bad input, at start --------------------------------------------------------------

OFFLOAD = {
    "kv_connector": "OffloadingConnector",
    "kv_role": "kv_both",
    # 4 KiB a chunk of one 16-token block here: 12 chunks
    "kv_connector_extra_config": {
        "cpu_bytes_to_use": 12 * 4096,
        "eviction_policy": NAME,
        "cache_policy_module_path": MODULE,
    },
}
STOCK_OFFLOAD = {
    **OFFLOAD,
    "kv_connector_extra_config": {"cpu_bytes_to_use": 12 * 4096, "eviction_policy": "lru"},
}


def build(
    model_dir: Path, schedkit: dict[str, Any] | None, cls: type | None = None, **kw: Any
) -> Any:
    return build_scheduler(
        num_blocks=kw.pop("num_blocks", 13),
        block_size=BLOCK_SIZE,
        model_dir=model_dir,
        schedkit=schedkit,
        cls=cls,
        kv_transfer=kw.pop("kv_transfer", OFFLOAD),
    )


def test_the_policy_outside_a_schedkit_scheduler_stops_the_start(model_dir: Path) -> None:
    with pytest.raises(PolicyConfigError, match=r"--scheduler-cls schedkit_vllm\.AsyncScheduler"):
        build(model_dir, None, VllmScheduler)
    with pytest.raises(PolicyConfigError, match="not schedkit's"):
        CPUOffloadingManager(num_chunks=4, cache_policy=NAME, cache_policy_module_path=MODULE)


def test_the_policy_without_a_schedkit_config_stops_the_start(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SCHEDKIT_CONFIG", raising=False)
    with pytest.raises(PolicyConfigError, match="no schedkit config") as stopped:
        build(model_dir, None)
    assert "--additional-config" in str(stopped.value)
    assert "SCHEDKIT_CONFIG" in str(stopped.value)
    assert "'lru'" in str(stopped.value)
    config = tmp_path / "schedkit.toml"
    config.write_text('policy = ["lfu"]\n')
    monkeypatch.setenv("SCHEDKIT_CONFIG", str(config))
    scheduler = build(model_dir, None)  # a config file is enough
    assert scheduler.offload_policies[0].facade is scheduler.schedkit.facade


@pytest.mark.parametrize("cls", [None, AsyncScheduler], ids=["sync", "async"])
def test_the_tier_asks_the_schedulers_own_policies(model_dir: Path, cls: type | None) -> None:
    scheduler = build(model_dir, {"policy": ["lfu"]}, cls)
    [policy] = scheduler.offload_policies
    assert scheduler.connector.connector_scheduler.manager._policy is policy
    assert policy.facade is scheduler.schedkit.facade
    assert policy.engine is scheduler.schedkit.engine
    assert policy._timed == scheduler.schedkit.timed  # calls counted in its metrics
    assert scheduler.schedkit.offload == [policy]


def test_a_stock_tier_beside_schedkit_is_left_alone(model_dir: Path) -> None:
    scheduler = build(model_dir, {"policy": ["lfu"]}, kv_transfer=STOCK_OFFLOAD)
    assert scheduler.offload_policies == ()
    assert not isinstance(
        scheduler.connector.connector_scheduler.manager._policy, offload.SchedkitCachePolicy
    )


# -- the whole connector, scheduler side ---------------------------------------------------


def worker_output(output: Any) -> KVConnectorOutput:
    """What the workers would report after the step: every load and store job the step
    submitted is complete, and the requests whose loads were asynchronous may run."""
    meta = output.kv_connector_metadata
    jobs = [*meta.load_jobs, *meta.store_jobs]
    landed = {job.req_id for job in meta.load_jobs.values() if not getattr(job, "sync", False)}
    done = OffloadingWorkerMetadata(completed_jobs=dict.fromkeys(jobs, 1))
    return KVConnectorOutput(finished_recving=landed, kv_connector_worker_meta=done)


def run_one(scheduler: Any, name: str, tokens: list[int], loads: list[str]) -> None:
    """Serve one request to the end (a step of one token per decode), then let the
    connector finish its stores."""
    scheduler.add_request(make_request(name, tokens, max_tokens=2))
    connector = scheduler.connector.connector_scheduler
    for _ in range(50):
        if not scheduler.has_requests() and not connector._jobs:
            return
        output = scheduler.schedule()
        loads += [job.req_id for job in output.kv_connector_metadata.load_jobs.values()]
        ids = list(output.num_scheduled_tokens)
        sampled = [[] if scheduler.requests[i].is_prefill_chunk else [7] for i in ids]
        result = model_runner_output(ids, sampled)
        result.kv_connector_output = worker_output(output)
        scheduler.update_from_output(output, result)
    raise AssertionError(f"{name} still running after 50 steps")


def serve_all(scheduler: Any) -> tuple[list[set[Any]], list[str]]:
    """a, b, c (four blocks each) fill the tier; a2 reloads a's prefix from it (the GPU
    evicted it for c); d makes the tier evict four chunks. The tier's contents after
    each request, and the requests that loaded from it."""
    manager = scheduler.connector.connector_scheduler.manager
    states: list[set[Any]] = []
    loads: list[str] = []
    for name, tokens in (
        ("a", [*prompt(1, 4), 1]),
        ("b", [*prompt(2, 4), 1]),
        ("c", [*prompt(3, 4), 1]),
        ("a2", [*prompt(1, 4), 2]),
        ("d", [*prompt(4, 4), 1]),
    ):
        run_one(scheduler, name, tokens, loads)
        states.append(set(manager._policy.chunks))
    return states, loads


def keys_of(name: str, conversation: int) -> list[Any]:
    request = make_request(name, [*prompt(conversation, 4), 1])
    return [make_offload_key(h, 0) for h in request.block_hashes]


def test_through_the_connector_no_opinion_is_vllms_lru(
    model_dir: Path, register_policy: Any
) -> None:
    register_policy("no-opinion", NoOpinion)
    expected, stock_loads = serve_all(
        build(model_dir, None, VllmScheduler, kv_transfer=STOCK_OFFLOAD)
    )
    assert stock_loads == ["a2"]  # a's chunks came back from host memory
    scheduler = build(model_dir, {"policy": ["no-opinion"]})
    states, loads = serve_all(scheduler)
    assert states == expected and loads == stock_loads
    [policy] = scheduler.offload_policies
    calls = scheduler.schedkit.facade.policies[0][1].calls
    assert [n for candidates, n in calls if isinstance(candidates[0], offload.OffloadChunkView)]
    assert policy.num_evicted_by_policy == 0


def test_through_the_connector_the_policy_chooses(model_dir: Path) -> None:
    a, b, c, d = (keys_of(n, i) for n, i in (("a", 1), ("b", 2), ("c", 3), ("d", 4)))
    # a2 finds a0-a2 in the GPU's prefix cache and loads a3 from host memory; for d the
    # tier evicts four chunks. vLLM's LRU: a's head (untouched since a) and b's tail.
    stock, _ = serve_all(build(model_dir, None, VllmScheduler, kv_transfer=STOCK_OFFLOAD))
    assert stock[-1] == {a[3], *b[:3], *c, *d}
    scheduler = build(model_dir, {"policy": ["prefix-aware"]})
    states, loads = serve_all(scheduler)
    assert loads == ["a2"] and states[:-1] == stock[:-1]
    # prefix-aware: fewest hits (a3 has one), then deepest class (2: depths 2 and 3),
    # then least recently used: a2, b3, b2, c3
    assert states[-1] == {a[0], a[1], a[3], *b[:2], *c[:3], *d}
    [policy] = scheduler.offload_policies
    assert [policy.views[k].num_hits for k in (a[0], a[1], a[3])] == [0, 0, 1]
    assert [policy.views[k].depth for k in c[:3]] == [0, 1, 2]
    assert policy.num_evicted_by_policy == 4
    # in the runtime's count (schedkit_evictions_total), with the GPU tier's
    gpu = scheduler.schedkit.eviction.num_evicted_by_policy
    assert scheduler.schedkit.num_evicted_by_policy == gpu + 4
