"""Requests waiting on KV loads are ordered and admitted with the rest (issue #39 item 3).

One meaning on every vLLM: ``order_waiting`` orders every waiting request that holds no
KV blocks, whether its KV will be computed or loaded by a KV connector, and the loads
start in the policy's order. vLLM 0.34 keeps requests whose KV a connector may load
asynchronously in a queue of their own, ``async_kv_waiting`` (with
``--max-num-inflight-kv-loads``), whose loads start even while the batch is full, and
picks between it and ``waiting`` by the heads' arrival: the adapter orders both queues
with one call and picks the head the policy puts first. Earlier releases keep those
requests in ``waiting``. Requests holding blocks (``kv_holding_waiting``, a load landed)
keep vLLM's order.

The connector is ``remote_kv.RemoteKV`` (a P/D decode side whose loads the test lands);
the sync scheduler is driven as ``EngineCore.step`` does, the async one as
``step_with_batch_queue`` does (a batch queue of 2).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest
import vllm
from conftest import BLOCK_SIZE, make_request
from remote_kv import RemoteKV, landed
from schedkit import Admission, EngineView, Policy, RequestView, hookimpl
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

from schedkit_vllm import AsyncScheduler, Scheduler
from schedkit_vllm.compat import parse_version
from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output

AT_LEAST_034 = parse_version(vllm.__version__)[:2] >= (0, 34)
needs_034 = pytest.mark.skipif(
    not AT_LEAST_034, reason=f"async_kv_waiting is new in vLLM 0.34 ({vllm.__version__})"
)

# name -> (schedkit class, stock vLLM class, batch queue depth)
DRIVERS = {
    "sync": (Scheduler, VllmScheduler, 1),
    "async": (AsyncScheduler, VllmAsyncScheduler, 2),
}
REMOTE = {"kv_connector": "RemoteKV", "kv_connector_module_path": "remote_kv", "kv_role": "kv_both"}


def build(
    cls: type,
    model_dir: Path,
    schedkit: dict[str, Any] | None,
    *,
    inflight: int | None,
    num_blocks: int = 128,
    max_num_seqs: int = 16,
) -> Any:
    options = {} if inflight is None else {"max_num_inflight_kv_loads": inflight}
    scheduler = build_scheduler(
        num_blocks=num_blocks,
        block_size=BLOCK_SIZE,
        max_num_seqs=max_num_seqs,
        model_dir=model_dir,
        schedkit=schedkit,
        cls=cls,
        scheduler_options=options,
        kv_transfer=REMOTE,
    )
    assert isinstance(scheduler.connector, RemoteKV)
    return scheduler


def remote(request_id: str, prompt: int, arrival: float, max_tokens: int = 4) -> Any:
    """A request whose prompt's KV a prefill instance computed: the connector loads it."""
    params = {"do_remote_prefill": True}
    return make_request(
        request_id, prompt, max_tokens, arrival_time=arrival, kv_transfer_params=params
    )


def drive(scheduler: Any, batch_queue: int, arrivals: dict[int, list[Any]]) -> list[str]:
    """Step until idle, ``arrivals[n]`` added before the n-th schedule() call; every load
    lands in the update of the step after the one that started it. The ids in the
    order their loads started."""
    connector: RemoteKV = scheduler.connector
    queue: deque[tuple[Any, Any]] = deque()
    calls = 0
    for _ in range(500):
        for request in arrivals.pop(calls, ()):
            scheduler.add_request(request)
        if not scheduler.has_requests() and not queue and not arrivals:
            assert not connector.loading
            return connector.started
        if len(queue) < batch_queue and (scheduler.has_requests() or arrivals):
            calls += 1
            output = scheduler.schedule()
            ids = list(output.num_scheduled_tokens)
            requests = scheduler.requests
            sampled = [[] if requests[rid].is_prefill_chunk else [7] for rid in ids]
            result = model_runner_output(ids, sampled)
            in_flight = set(connector.loading)  # started before this step's update
            queue.appendleft((output, result, in_flight))
            if len(queue) < batch_queue and scheduler.has_requests():
                continue
        output, result, in_flight = queue.pop()
        result.kv_connector_output = landed(connector, in_flight & connector.loading)
        scheduler.update_from_output(output, result)
    raise AssertionError("scheduler still busy after 500 steps")


INFLIGHT = [
    pytest.param(None, id="no-inflight-limit"),
    pytest.param(1, id="inflight-1", marks=needs_034),
    pytest.param(8, id="inflight-8", marks=needs_034),
]


@pytest.mark.parametrize("inflight", INFLIGHT)
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_loads_start_in_the_policy_order(
    driver: str, inflight: int | None, model_dir: Path
) -> None:
    ours, stock, batch_queue = DRIVERS[driver]

    def arrivals() -> dict[int, list[Any]]:
        lengths = {"r0": 60, "r1": 20, "r2": 40, "r3": 30}
        return {0: [remote(rid, n, 1.0 + i) for i, (rid, n) in enumerate(lengths.items())]}

    scheduler = build(stock, model_dir, None, inflight=inflight)
    assert drive(scheduler, batch_queue, arrivals()) == ["r0", "r1", "r2", "r3"]
    scheduler = build(ours, model_dir, {"policy": ["shortest-prompt"]}, inflight=inflight)
    assert drive(scheduler, batch_queue, arrivals()) == ["r1", "r3", "r2", "r0"]
    if inflight is not None:  # they waited in async_kv_waiting, ordered there
        assert scheduler.schedkit.waiting_rank is None  # all started: nothing to pick
        assert not scheduler.async_kv_waiting


@needs_034
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_loads_start_in_the_policy_order_while_the_batch_is_full(
    driver: str, model_dir: Path
) -> None:
    """One running slot, held by a long local request: vLLM starts loads anyway (they
    take no slot), one at a time here, and the policy orders them."""
    ours, stock, batch_queue = DRIVERS[driver]

    def arrivals() -> dict[int, list[Any]]:
        busy = make_request("busy", 20, max_tokens=40, arrival_time=0.0)
        later = [remote("r0", 60, 1.0), remote("r1", 20, 2.0), remote("r2", 40, 3.0)]
        return {0: [busy], 2: later}

    runs = {}
    for name, cls, schedkit in (
        ("stock", stock, None),
        ("ours", ours, {"policy": ["shortest-prompt"]}),
    ):
        scheduler = build(cls, model_dir, schedkit, inflight=1, max_num_seqs=1)
        runs[name] = drive(scheduler, batch_queue, arrivals())
    assert runs == {"stock": ["r0", "r1", "r2"], "ours": ["r1", "r2", "r0"]}


@needs_034
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_the_head_the_policy_puts_first_gets_the_blocks(driver: str, model_dir: Path) -> None:
    """Four usable blocks: a local 48-token prompt (3 blocks, arrived first) and a
    remote 32-token one (2 blocks) cannot both start. vLLM picks between the queues by
    arrival; shortest-prompt puts the remote one first, whose load takes its blocks."""
    ours, stock, _ = DRIVERS[driver]
    first: dict[str, tuple[list[str], list[str]]] = {}
    for name, cls, schedkit in (
        ("stock", stock, None),
        ("ours", ours, {"policy": ["shortest-prompt"]}),
    ):
        scheduler = build(cls, model_dir, schedkit, inflight=4, num_blocks=5)
        scheduler.add_request(make_request("local", 3 * BLOCK_SIZE, arrival_time=1.0))
        scheduler.add_request(remote("remote", 2 * BLOCK_SIZE, 2.0))
        assert [r.request_id for r in scheduler.async_kv_waiting] == ["remote"]
        output = scheduler.schedule()
        admitted = [new.req_id for new in output.scheduled_new_reqs]
        first[name] = (admitted, list(scheduler.connector.started))
    assert first == {"stock": (["local"], []), "ours": ([], ["remote"])}


class RejectRemote(Policy):
    """Rejects every request with KV to load (its prompt is in ``kv_transfer_params``)."""

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        if request.request_id.startswith("remote"):
            return Admission.reject("no remote prefills here")
        return None


@pytest.mark.parametrize("inflight", INFLIGHT)
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_admission_sees_requests_with_kv_to_load(
    driver: str, inflight: int | None, model_dir: Path, register_policy: Any
) -> None:
    ours, _, batch_queue = DRIVERS[driver]
    register_policy("reject-remote", RejectRemote)
    scheduler = build(ours, model_dir, {"policy": ["reject-remote"]}, inflight=inflight)
    free = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    local = make_request("local", 40, arrival_time=1.0)
    started = drive(scheduler, batch_queue, {0: [remote("remote-0", 40, 0.5), local]})
    assert started == []  # the rejected request's load never started
    assert scheduler.schedkit.rejections == {"no remote prefills here": 1}
    assert not scheduler.requests
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free
    if AT_LEAST_034:
        assert not scheduler.async_kv_waiting
