"""The views the simulator hands policies are read-only, as on vLLM and SGLang: a policy
that sets a field gets an ``AttributeError``, which the facade counts as a policy error
while the engine decides as if the policy had no opinion."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from _fixtures import ROOFLINE, engine, record_diffs, req

from schedkit import (
    BlockState,
    BlockView,
    EngineView,
    Policy,
    PolicyFacade,
    RequestView,
    StepReport,
)
from schedkit import hookimpl as impl
from schedkit.errors import PolicyDecisionError
from schedkit.hookspecs import HOOK_NAMES
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.engine import SimEngine
from schedkit.sim.request import SimRequest
from schedkit.views import BlockSnapshot
from schedkit.workload import load_workload


def fields(protocol: type) -> list[str]:
    return sorted(name for name, value in vars(protocol).items() if isinstance(value, property))


REQUEST_FIELDS = fields(RequestView)
ENGINE_FIELDS = fields(EngineView)
BLOCK_FIELDS = fields(BlockView)


def test_the_protocols_list_the_fields() -> None:
    assert "priority" in REQUEST_FIELDS and len(REQUEST_FIELDS) == 13
    assert "kv_blocks_free" in ENGINE_FIELDS and len(ENGINE_FIELDS) == 7
    assert BLOCK_FIELDS == ["block_hash", "depth", "depth_class", "last_access", "num_hits"]


def sim_request() -> SimRequest:
    trace = req("r0", 1.5, 100, 20, hash_ids=(7, 8), priority=3)
    return SimRequest.from_trace(0, trace, block_size=16, hash_block_tokens=32)


@pytest.mark.parametrize("name", REQUEST_FIELDS)
def test_a_simulated_request_refuses_writes_to_its_view(name: str) -> None:
    request = sim_request()
    before = getattr(request, name)
    with pytest.raises(AttributeError):
        setattr(request, name, before)
    assert getattr(request, name) == before


def test_a_simulated_request_reads_as_its_trace_says() -> None:
    request = sim_request()
    assert (request.request_id, request.priority, request.arrival_time) == ("r0", 3, 1.5)
    assert (request.num_prompt_tokens, request.max_tokens, request.tenant) == (100, 20, "default")
    assert request.num_computed_tokens == request.num_output_tokens == 0
    assert request.num_preemptions == request.num_cached_tokens == 0
    assert request.block_hashes == ()
    with pytest.raises(AttributeError):
        request.note = "mine"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", BLOCK_FIELDS)
def test_a_block_snapshot_refuses_writes(name: str) -> None:
    block = BlockSnapshot(41, depth=2, last_access=0.5, num_hits=3)
    before = getattr(block, name)
    with pytest.raises(AttributeError):
        setattr(block, name, 0)
    assert getattr(block, name) == before
    assert repr(block) == "BlockSnapshot(block_hash=41, depth=2, last_access=0.5, num_hits=3)"


def test_the_test_doubles_stay_settable() -> None:
    block = BlockState(41, depth=2)
    block.num_hits = block.last_access = 1  # the conformance kit changes them between calls
    assert (block.num_hits, block.last_access) == (1, 1)


# -- a policy that writes to what it is given ---------------------------------------------


class Meddler(Policy):
    """Implements every hook, and in each sets a field of a view it was given (a request's,
    in turn each of them, or the engine's): every write must raise ``AttributeError``."""

    def __init__(self, blocks: bool = False) -> None:
        super().__init__()
        self.blocks = blocks  # also write to eviction candidates
        self._request_fields = itertools.cycle(REQUEST_FIELDS)
        self._engine_fields = itertools.cycle(ENGINE_FIELDS)
        self._block_fields = itertools.cycle(BLOCK_FIELDS)
        self.calls: dict[str, int] = {}
        self.refused: dict[str, int] = {}  # hook -> writes refused with AttributeError
        self.fields_tried: set[str] = set()

    def _write(self, hook: str, view: object, name: str) -> None:
        self.calls[hook] = self.calls.get(hook, 0) + 1
        self.fields_tried.add(name)
        try:
            setattr(view, name, getattr(view, name))
        except AttributeError:
            self.refused[hook] = self.refused.get(hook, 0) + 1
            raise

    def _request(self, hook: str, request: RequestView) -> None:
        self._write(hook, request, next(self._request_fields))

    @impl
    def on_request_arrived(self, request: RequestView, engine: EngineView) -> None:
        self._request("on_request_arrived", request)

    @impl
    def admit_request(self, request: RequestView, engine: EngineView) -> None:
        self._request("admit_request", request)

    @impl
    def order_waiting(self, waiting: Sequence[RequestView], engine: EngineView) -> None:
        self._request("order_waiting", waiting[-1])

    @impl
    def plan_batch(self, engine: EngineView, default: object) -> None:
        self._write("plan_batch", engine, next(self._engine_fields))

    @impl
    def select_victims(
        self, running: Sequence[RequestView], needing: RequestView, engine: EngineView
    ) -> None:
        self._request("select_victims", needing)

    @impl
    def select_evictions(
        self, candidates: Sequence[BlockView], num_blocks: int, engine: EngineView
    ) -> None:
        if self.blocks:
            self._write("select_evictions", candidates[0], next(self._block_fields))
        else:
            self._write("select_evictions", engine, next(self._engine_fields))

    @impl
    def waiting_key(self, request: RequestView, engine: EngineView) -> None:
        self._request("waiting_key", request)

    @impl
    def victim_key(self, request: RequestView, engine: EngineView) -> None:
        self._request("victim_key", request)

    @impl
    def eviction_key(self, block: BlockView, engine: EngineView) -> None:
        if self.blocks:
            self._write("eviction_key", block, next(self._block_fields))
        else:
            self._write("eviction_key", engine, next(self._engine_fields))

    @impl
    def on_step_finished(self, report: StepReport, engine: EngineView) -> None:
        self._request("on_step_finished", [*report.scheduled, *report.preempted][0])

    @impl
    def on_request_finished(self, request: RequestView, reason: str, engine: EngineView) -> None:
        self._request("on_request_finished", request)


def run(policy: Meddler | None, stretch: bool = True) -> RunResult:
    """300 requests of the Azure trace in a cache small enough to preempt and evict."""
    requests = load_workload("azure-conv").scaled(3).truncated(300).requests
    policies = [("meddler", policy)] if policy else []
    return engine(
        requests, SimConfig(num_blocks=700), policies, cost=ROOFLINE, stretch=stretch
    ).run()


@pytest.mark.parametrize("stretch", [True, False])
def test_a_policy_writing_to_its_views_is_refused_and_counted(stretch: bool) -> None:
    meddler = Meddler()
    result = run(meddler, stretch)
    assert set(meddler.calls) == set(HOOK_NAMES) - {"route_request"}  # every hook was asked
    # (one engine routes nothing; a cluster's router: tests/sim/test_cluster.py)
    assert meddler.fields_tried >= {*REQUEST_FIELDS, *ENGINE_FIELDS}
    assert meddler.refused == meddler.calls  # every write raised AttributeError...
    assert result.policy_errors_by_hook == {f"meddler.{h}": n for h, n in meddler.calls.items()}
    # ...and nothing changed: every request finished as without the policy.
    plain = run(None, stretch)
    assert all(r.finish_reason == "length" for r in result.records)
    assert record_diffs(result.records, plain.records, rel=1e-9) == []
    assert result.steps == plain.steps and result.preemptions == plain.preemptions > 0


def test_a_policy_writing_to_eviction_candidates_is_refused() -> None:
    meddler = Meddler(blocks=True)
    run(meddler)
    assert meddler.refused.get("select_evictions") == meddler.calls["select_evictions"] > 0
    assert meddler.refused.get("eviction_key") == meddler.calls["eviction_key"] > 0


def test_a_write_fails_a_strict_run_naming_the_hook() -> None:
    requests = [req("r0", 0.0, 100, 4)]
    facade = PolicyFacade([("meddler", Meddler())], strict=True)
    eng = SimEngine(requests, ROOFLINE, SimConfig(num_blocks=100), facade)
    with pytest.raises(PolicyDecisionError, match="on_request_arrived") as failed:
        eng.run()
    assert isinstance(failed.value.__cause__, AttributeError)
