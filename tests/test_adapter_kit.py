"""The adapter kit: step ledger, metadata parsing, version check, runtime bookkeeping."""

from __future__ import annotations

import math

import pytest
from _policies import make_requests, scripted

from schedkit import Admission, EngineState, PolicyFacade, StepReport
from schedkit.adapter import (
    AdapterRuntime,
    StepLedger,
    UnsupportedEngineError,
    check_engine_version,
    parse_metadata,
    parse_priority,
)
from schedkit.adapter.metadata_view import FROZEN_FIELDS, MetadataView
from schedkit.adapter.runtime import report_of
from schedkit.seal import SEAL_KEY, Seal
from schedkit.trust import TrustConfig


def _report(n: int) -> StepReport:
    return StepReport(1, 0.0, 0, n)


def test_ledger_closes_each_step_with_its_own_report_in_any_order() -> None:
    ledger = StepLedger()
    keys = [object() for _ in range(3)]
    for i, key in enumerate(keys):
        ledger.open(key, _report(i), started=0.0)
    # Pipelined: step 1's results come after step 2 was scheduled, out of order.
    assert [ledger.close(k).num_decode_tokens for k in (keys[1], keys[0], keys[2])] == [1, 0, 2]  # type: ignore[union-attr]
    assert ledger.close(keys[0]) is None, "a step is reported once"
    assert len(ledger) == 0


def test_ledger_is_bounded_when_an_engine_drops_steps() -> None:
    ledger = StepLedger(limit=4)
    keys = [object() for _ in range(10)]
    for key in keys:
        ledger.open(key, _report(0))
    assert len(ledger) == 4 and ledger.dropped == 6
    assert ledger.close(keys[0]) is None and ledger.close(keys[-1]) is not None


def test_ledger_sets_the_duration_from_the_start() -> None:
    ledger = StepLedger()
    key = object()
    ledger.open(key, _report(0), started=0.0)
    report = ledger.close(key)
    assert report is not None and report.duration_s > 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("250", 250.0),
        (250, 250.0),
        (float("nan"), None),
        (float("inf"), None),
        ("-inf", None),
        (0, None),
        (-5, None),
        (True, None),
        ("fast", None),
        ([1], None),
    ],
)
def test_slo_targets_are_finite_positive_ms_or_absent(raw: object, expected: float | None) -> None:
    meta = parse_metadata({"slo_ttft_ms": raw, "slo_tpot_ms": raw})
    assert meta.slo_ttft_ms == expected and meta.slo_tpot_ms == expected
    if expected is not None:
        assert math.isfinite(expected)


def test_metadata_defaults_and_tenant() -> None:
    assert parse_metadata(None).tenant == "default"
    assert parse_metadata({}).tenant == "default"
    assert parse_metadata({"tenant": ""}).tenant == "default"
    assert parse_metadata({"tenant": 7}).tenant == "7"
    assert parse_metadata("not a mapping").tenant == "default"  # type: ignore[arg-type]


@pytest.mark.parametrize(("raw", "expected"), [(None, 0), (3, 3), ("-2", -2), ("x", 0), (True, 0)])
def test_priority_absent_means_zero(raw: object, expected: int) -> None:
    assert parse_priority(raw) == expected


def test_version_check_names_installed_supported_and_install_command() -> None:
    check_engine_version(
        "vLLM", "0.33.0", (0, 32), (0, 34), "pip install vllm==0.33.0", adapter="x"
    )
    check_engine_version("vLLM", "0.32.1.dev3+cpu", (0, 32), (0, 34), "i", adapter="x")
    with pytest.raises(UnsupportedEngineError) as info:
        check_engine_version(
            "vLLM", "0.34.0", (0, 32), (0, 34), "pip install vllm==0.33.0", adapter="schedkit-vllm"
        )
    message = str(info.value)
    assert "0.34.0" in message and ">=0.32,<0.34" in message
    assert "pip install vllm==0.33.0" in message and "schedkit-vllm" in message
    with pytest.raises(UnsupportedEngineError, match="cannot read"):
        check_engine_version("SGLang", "main", (0, 5, 23), (0, 6), "i", adapter="x")
    with pytest.raises(UnsupportedEngineError):
        check_engine_version("SGLang", "0.5.22", (0, 5, 23), (0, 6), "i", adapter="x")


def test_runtime_counts_rejections_and_reports_each_step_once() -> None:
    seen: list[StepReport] = []
    policy = scripted(
        admit_request=lambda r, e: (
            Admission.reject("too long") if r.num_prompt_tokens > 100 else None
        ),
        on_step_finished=lambda report, e: seen.append(report),
        on_request_finished=None,
    )
    engine = EngineState(kv_blocks_total=10, block_size=16)
    runtime = AdapterRuntime(PolicyFacade([("p", policy)]), engine)
    short, long = make_requests(2)
    assert runtime.admission_reason(short) is None  # 100 tokens
    assert runtime.admission_reason(long) == "too long"
    assert runtime.rejections == {"too long": 1}

    a, b = object(), object()
    runtime.open_step(a, report_of([short], [5], 5, 0))
    runtime.open_step(b, report_of([short], [1], 0, 1))
    runtime.close_step(b)
    runtime.close_step(a)
    runtime.close_step(a)
    assert [r.num_scheduled_tokens for r in seen] == [[1], [5]]

    runtime.request_finished(long, "rejected")
    assert runtime.finished == {"rejected": 1}
    assert policy.calls_to("on_request_finished") == [(long, "rejected", engine)]


class _View(MetadataView):
    """The smallest adapter view: metadata from a mapping, priority from a live field."""

    __slots__ = ("field",)

    def __init__(
        self, fields: object, field: object, trust: TrustConfig, seal: Seal | None
    ) -> None:
        self.field = field
        self._read_metadata(fields, trust, seal)

    def _claimed_priority(self) -> object:
        return self.field


def test_metadata_view_reads_tenant_slo_and_live_priority_within_the_bounds() -> None:
    trust = TrustConfig(priority_range=(-5, 5), tenant_priority={"gold": -3})
    view = _View({"tenant": "acme", "slo_ttft_ms": 250, "slo_tpot_ms": "x"}, 9, trust, None)
    assert (view.tenant, view.slo_ttft_ms, view.slo_tpot_ms) == ("acme", 250.0, None)
    assert view.priority == 5, "clamped to priority_range"
    view.field = -2  # the engine changed the request's priority after arrival
    assert view.priority == -2
    gold = _View({"tenant": "gold"}, 4, trust, None)
    assert gold.priority == -3, "a tenant's tier wins over the request's field"
    assert _View(None, None, trust, None).tenant == "default"


def test_metadata_view_treats_unsealed_metadata_as_a_claim_when_the_edge_has_a_key() -> None:
    seal, trust = Seal("k" * 32), TrustConfig(tenant_priority={"gold": -3})
    fields: dict[str, object] = {"tenant": "gold", "slo_ttft_ms": 100}
    claimed = _View(fields, 7, trust, seal)
    assert (claimed.tenant, claimed.slo_ttft_ms, claimed.priority) == ("default", None, 0)
    sealed = _View({**fields, SEAL_KEY: seal.sign(fields)}, 7, trust, seal)
    assert (sealed.tenant, sealed.slo_ttft_ms, sealed.priority) == ("gold", 100.0, -3)


class _LiveView(_View):
    """Every RequestView field read live from ``state``, as an engine's view reads its
    request (which the engine may clear or reuse once the request finished)."""

    __slots__ = ("state",)

    def __init__(self, state: dict[str, object]) -> None:
        super().__init__({"tenant": "acme"}, 1, TrustConfig(), None)
        self.state = state

    request_id = property(lambda self: "r1")
    arrival_time = property(lambda self: self.state["arrival_time"])
    num_prompt_tokens = property(lambda self: self.state["num_prompt_tokens"])
    num_cached_tokens = property(lambda self: self.state["num_cached_tokens"])
    num_computed_tokens = property(lambda self: self.state["num_computed_tokens"])
    num_output_tokens = property(lambda self: self.state["num_output_tokens"])
    max_tokens = property(lambda self: self.state["max_tokens"])
    num_preemptions = property(lambda self: self.state["num_preemptions"])
    block_hashes = property(lambda self: self.state["block_hashes"])


def _live_state() -> dict[str, object]:
    return {
        "arrival_time": 1.5,
        "num_prompt_tokens": 64,
        "num_cached_tokens": 32,
        "num_computed_tokens": 67,
        "num_output_tokens": 3,
        "max_tokens": 8,
        "num_preemptions": 1,
        "block_hashes": [11, 12],
    }


def test_a_frozen_view_reads_its_last_state_after_the_engine_clears_the_request() -> None:
    state = _live_state()
    view, live = _LiveView(state), _LiveView(_live_state())
    before = {name: getattr(view, name) for name in FROZEN_FIELDS}
    view.freeze()
    state.update(num_computed_tokens=0, block_hashes=[], num_output_tokens=0)  # reused
    view.field = 9  # and its priority field
    assert {name: getattr(view, name) for name in FROZEN_FIELDS} == {
        **before,
        "block_hashes": (11, 12),
    }
    assert isinstance(view, _LiveView) and type(view).__name__ == "Frozen_LiveView"
    assert (view.request_id, view.tenant) == ("r1", "acme")
    view.freeze()  # once is enough: a second call changes nothing
    assert view.num_computed_tokens == 67
    live.state["num_computed_tokens"] = 5  # a view not frozen stays live
    assert live.num_computed_tokens == 5 and type(live) is _LiveView


def test_the_runtime_freezes_a_finished_requests_view_when_a_policy_could_keep_it() -> None:
    engine = EngineState(kv_blocks_total=8, block_size=16)
    for policies, frozen in (([], False), ([("p", scripted(order_waiting=None))], True)):
        runtime = AdapterRuntime(PolicyFacade(policies), engine)
        view = _LiveView(_live_state())
        runtime.request_finished(view, "length")
        assert (type(view).__name__ == "Frozen_LiveView") is frozen
