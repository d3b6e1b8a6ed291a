"""The adapter's pieces that need no engine: config from the environment, the version
check, the plugin's activation rule, the CPU stand-ins."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from schedkit import Policy, RequestView, hookimpl
from schedkit.capabilities import MATRIX
from schedkit.errors import PolicyConfigError, UnknownPolicyError

from schedkit_sglang import compat, cpu, patches, plugin
from schedkit_sglang.config import config_environ, resolve_config
from schedkit_sglang.runtime import SglangRuntime


def test_no_variables_means_no_config() -> None:
    assert resolve_config({}) is None


def test_policy_and_options_variables() -> None:
    config = resolve_config(
        {
            "SCHEDKIT_POLICY": "shortest-prompt+priority",
            "SCHEDKIT_OPTIONS": '{"shortest-prompt": {"max_wait_s": 5}}',
        }
    )
    assert config is not None
    assert config.policy == ["shortest-prompt", "priority"]
    assert config.options == {"shortest-prompt": {"max_wait_s": 5}}


def test_config_file_and_json_text(tmp_path: Path) -> None:
    path = tmp_path / "schedkit.toml"
    path.write_text('policy = ["priority"]\n')
    assert resolve_config({"SCHEDKIT_CONFIG": str(path)}).policy == ["priority"]  # type: ignore[union-attr]
    text = json.dumps({"policy": ["fcfs"]})
    assert resolve_config({"SCHEDKIT_CONFIG": text}).policy == ["fcfs"]  # type: ignore[union-attr]


def test_config_environ_round_trips() -> None:
    config = resolve_config({"SCHEDKIT_POLICY": "priority"})
    assert config is not None
    assert resolve_config(config_environ(config)) == config


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SCHEDKIT_CONFIG": "/no/such/file.toml"}, "neither a JSON object nor a file"),
        ({"SCHEDKIT_CONFIG": "{}", "SCHEDKIT_POLICY": "fcfs"}, "not both"),
        ({"SCHEDKIT_OPTIONS": "{}"}, "SCHEDKIT_POLICY is not"),
        ({"SCHEDKIT_POLICY": "fcfs", "SCHEDKIT_OPTIONS": "{"}, "not valid JSON"),
    ],
)
def test_bad_variables_name_what_is_wrong(environ: dict[str, str], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        resolve_config(environ)


def test_supported_versions() -> None:
    compat.check_version("0.5.23")
    compat.check_version("0.5.30.post1")
    for version in ("0.5.22", "0.6.0", "1.0"):
        with pytest.raises(compat.UnsupportedSglangError, match="supports SGLang"):
            compat.check_version(version)
    compat.check_version(compat.installed_version())  # the one these tests run against


def _registered() -> dict[str, list[object]]:
    from sglang.srt.plugins.hook_registry import HookRegistry

    return {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}


def test_without_a_config_the_plugin_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SCHEDKIT_CONFIG", "SCHEDKIT_POLICY", "SCHEDKIT_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    before = _registered()
    plugin.load()
    assert _registered() == before


def test_a_policy_registers_only_the_patches_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(HookRegistry, "_hooks", type(HookRegistry._hooks)(list))
    monkeypatch.setenv("SCHEDKIT_POLICY", "shortest-prompt")
    plugin.load()
    targets = set(HookRegistry._hooks)
    assert f"{patches.POLICY}.calc_priority" in targets
    assert f"{patches.SCHEDULER}._add_request_to_queue" not in targets  # no admission hook
    assert f"{patches.BATCH}._get_decode_retraction_order" not in targets


def test_an_unknown_policy_stops_the_scheduler_with_the_installed_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(HookRegistry, "_hooks", type(HookRegistry._hooks)(list))
    monkeypatch.setenv("SCHEDKIT_POLICY", "no-such-policy")
    plugin.load()
    [(_kind, hook, _source)] = HookRegistry._hooks[f"{patches.SCHEDULER}.__init__"]
    with pytest.raises(UnknownPolicyError, match="fcfs"):
        hook(object())


def test_cpu_stand_ins_import() -> None:
    cpu.install()
    import sgl_kernel  # type: ignore[import-not-found]
    import torchvision  # type: ignore[import-not-found]

    assert sgl_kernel.anything is not None
    assert torchvision.__version__ == "0"


def _req(priority: int | None = None, **custom: object) -> object:
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=7, custom_params=custom or None)
    return Req("r1", "", array("q", [5, 6, 7]), params, priority=priority)


def test_request_view_reads_tenant_slo_and_priority_from_sglangs_request() -> None:
    from schedkit_sglang.views import SglangRequestView

    view = SglangRequestView(_req(3, tenant="acme", slo_ttft_ms=500, slo_tpot_ms="40"), 0.0)
    assert (view.request_id, view.tenant, view.priority) == ("r1", "acme", 3)
    assert (view.slo_ttft_ms, view.slo_tpot_ms) == (500.0, 40.0)
    assert (view.num_prompt_tokens, view.max_tokens, view.num_output_tokens) == (3, 7, 0)
    assert (view.num_computed_tokens, view.num_preemptions, view.num_cached_tokens) == (0, 0, 0)
    assert view.block_hashes == ()  # not matched against the radix tree yet


def test_request_view_defaults_without_metadata() -> None:
    from schedkit_sglang.views import SglangRequestView

    view = SglangRequestView(_req(None, slo_ttft_ms="soon"), 0.0)
    assert (view.tenant, view.priority, view.slo_ttft_ms, view.slo_tpot_ms) == (
        "default",
        0,
        None,
        None,
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5, 0, "nan", True])
def test_an_slo_that_is_not_a_finite_positive_number_is_absent(bad: object) -> None:
    from schedkit_sglang.views import SglangRequestView

    view = SglangRequestView(_req(None, slo_ttft_ms=bad, slo_tpot_ms=bad, tenant=""), 0.0)
    assert (view.tenant, view.slo_ttft_ms, view.slo_tpot_ms) == ("default", None, None)


def test_request_view_keeps_metadata_within_the_trust_bounds() -> None:
    """Defence in depth for requests that did not pass the HTTP edge (``sglang.Engine``)."""
    import sys

    from schedkit.trust import TrustConfig

    from schedkit_sglang.views import SglangRequestView

    view = SglangRequestView(_req(-(2**62), tenant="x" * 5000, slo_tpot_ms=0.01), 0.0)
    assert (view.tenant, view.priority, view.slo_tpot_ms) == ("x" * 64, -1000, 1.0)
    unset = SglangRequestView(_req(sys.maxsize), 0.0, unset_priority=sys.maxsize)
    assert unset.priority == sys.maxsize  # SGLang's own value for "no priority" stays
    trust = TrustConfig(tenant_priority={"offline": 1})
    tier = SglangRequestView(_req(-3, tenant="offline"), 0.0, trust=trust)
    assert tier.priority == 1


def test_unsealed_metadata_is_a_client_claim_with_an_edge_key() -> None:
    """Defence in depth (issue #35): with the server's edge key, metadata the edge did not
    seal grants nothing; sealed metadata and metadata without a key are the operator's."""
    from schedkit.seal import Seal
    from schedkit.trust import DEFAULT_TRUST

    from schedkit_sglang.views import SglangRequestView

    seal = Seal("an-edge-key-of-32-characters-000")
    claims: dict[str, object] = {"tenant": "premium", "slo_ttft_ms": 1}
    claimed = SglangRequestView(_req(-1000, **claims), 0.0, trust=DEFAULT_TRUST, seal=seal)
    assert (claimed.tenant, claimed.priority, claimed.slo_ttft_ms) == ("default", 0, None)
    sealed = {**claims, "schedkit_seal": seal.sign(claims)}
    vouched = SglangRequestView(_req(-1000, **sealed), 0.0, trust=DEFAULT_TRUST, seal=seal)
    assert (vouched.tenant, vouched.priority, vouched.slo_ttft_ms) == ("premium", -1000, 1.0)
    offline = SglangRequestView(_req(-1000, **claims), 0.0)
    assert (offline.tenant, offline.priority) == ("premium", -1000)


def test_trust_rewrite_of_sglang_bodies() -> None:
    from schedkit.trust import TrustConfig

    from schedkit_sglang.trust import rewrite

    trust = TrustConfig()
    native = {"input_ids": [1], "sampling_params": {"custom_params": {"tenant": "v", "k": 1}}}
    native["priority"] = -(2**62)
    assert rewrite(trust, "acme", native, "/generate") == []
    assert native == {
        "input_ids": [1],
        "sampling_params": {"custom_params": {"k": 1, "tenant": "acme"}},
    }
    bare: dict[str, object] = {"input_ids": [1]}
    assert rewrite(trust, "acme", bare, "/generate") == []
    assert bare["sampling_params"] == {"custom_params": {"tenant": "acme"}}
    batch = {
        "input_ids": [[1], [2]],
        "sampling_params": [{}, {"custom_params": {"slo_tpot_ms": "x"}}],
    }
    problems = rewrite(trust, None, batch, "/generate")
    assert [p.field for p in problems] == ["sampling_params[1].custom_params.slo_tpot_ms"]
    openai = {"prompt": "hi", "custom_params": {"tenant": "v"}, "priority": 5}
    assert rewrite(TrustConfig(priority_from_body=True), "a", openai, "/v1/completions") == []
    assert openai == {"prompt": "hi", "custom_params": {"tenant": "a"}, "priority": 5}


def test_the_trust_middleware_goes_only_to_the_http_launcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    from types import SimpleNamespace

    from schedkit_sglang import plugin

    monkeypatch.setattr(sys, "argv", ["/venv/bin/python"])
    assert not plugin._is_http_launcher()
    monkeypatch.setattr(sys, "argv", ["/venv/bin/sglang", "serve", "--model-path", "m"])
    assert plugin._is_http_launcher()
    main = SimpleNamespace(__spec__=SimpleNamespace(name="sglang.launch_server"))
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["x"])
    assert plugin._is_http_launcher()


def _fake_scheduler(**settings: object) -> object:
    from types import SimpleNamespace

    values: dict[str, object] = {
        "enable_priority_scheduling": False,
        "schedule_low_priority_values_first": False,
        "server_args": SimpleNamespace(default_priority_value=None),
        "page_size": 1,
        "token_to_kv_pool_allocator": SimpleNamespace(size=64),
        **settings,
    }
    return SimpleNamespace(**values)


class ArrivalsOnly(Policy):
    """Observes arrivals, and nothing else (no admission hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    @hookimpl
    def on_request_arrived(self, request: RequestView) -> None:
        self.seen.append(request.request_id)


def test_an_arrival_observer_alone_sees_every_new_request() -> None:
    """``on_request_arrived`` without ``admit_request``: the admission patch is registered
    and calls the facade for every new request (not for a retracted one going back). The
    contract suite checks the same on the real engine (its recorder observes arrivals
    only; ``check_outcome`` asserts one arrival per request)."""
    from schedkit import PolicyFacade

    policy = ArrivalsOnly()
    facade = PolicyFacade([("arrivals", policy)])
    assert not facade.has_admit and facade.sees_arrivals
    assert f"{patches.SCHEDULER}._add_request_to_queue" in patches.plan(facade)
    scheduler = _fake_scheduler()
    scheduler.schedkit = SglangRuntime(scheduler, facade)  # type: ignore[attr-defined]
    queued: list[object] = []

    def original(self: object, req: object, is_retracted: bool = False) -> None:
        queued.append(req)

    first, second = _req(None), _req(None)
    second.rid = "r2"  # type: ignore[attr-defined]
    for req in (first, second):
        patches._add_request(original, scheduler, req)
    patches._add_request(original, scheduler, first, True)  # retracted: back, not new
    assert policy.seen == ["r1", "r2"]
    assert queued == [first, second, first]


def test_a_partly_supported_hook_warns_at_scheduler_init(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from schedkit import PolicyFacade

    facade = PolicyFacade.from_config({"policy": ["lcf", "test-one-at-a-time"]})
    init = patches.plan(facade)[f"{patches.SCHEDULER}.__init__"][0]
    scheduler = _fake_scheduler()
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        init(lambda self: None, scheduler)
    assert isinstance(scheduler.schedkit, SglangRuntime)  # type: ignore[attr-defined]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for hook in ("plan_batch", "select_victims"):
        [message] = [w for w in warnings if hook in w]
        assert "sglang supports only in part" in message
        assert "capability matrix" in message
        assert MATRIX[hook]["sglang"].note in message
    assert not [w for w in warnings if "order_waiting" in w]  # fully supported


@pytest.mark.parametrize(
    ("enabled", "low_first", "default"),
    [
        (False, False, None),
        (False, True, 7),
        (True, True, None),
        (True, False, None),
        (True, True, 7),
    ],
)
def test_a_request_without_priority_has_the_priority_sglang_schedules_it_by(
    enabled: bool, low_first: bool, default: int | None
) -> None:
    """schedkit's default is 0; with --enable-priority-scheduling SGLang gives such a
    request --default-priority-value (tokenizer) or its "last" value (scheduler, at queue
    entry). Policies and the priority preemption see that value, before and after."""
    from types import SimpleNamespace

    from schedkit import PolicyFacade, SchedkitConfig
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    from schedkit_sglang.runtime import SglangRuntime

    scheduler = SimpleNamespace(
        enable_priority_scheduling=enabled,
        schedule_low_priority_values_first=low_first,
        abort_on_priority_when_disabled=False,
        server_args=SimpleNamespace(default_priority_value=default),
        page_size=1,
        token_to_kv_pool_allocator=SimpleNamespace(size=64),
    )
    runtime = SglangRuntime(
        scheduler, PolicyFacade.from_config(SchedkitConfig(policy=["priority"]))
    )
    req = _req(None)
    seen = runtime.view(req).priority  # at admission, before SGLang's queue entry
    assert runtime.priority(req) == seen  # what the priority preemption compares
    # What SGLang does: the tokenizer's default, then the scheduler's at queue entry.
    sent = SimpleNamespace(priority=None)
    TokenizerManager._set_default_priority(
        SimpleNamespace(enable_priority_scheduling=enabled, default_priority_value=default), sent
    )
    req.priority = sent.priority  # type: ignore[attr-defined]
    assert Scheduler._set_or_validate_priority(scheduler, req)
    sglang = req.priority if req.priority is not None else 0  # type: ignore[attr-defined]
    assert seen == sglang == runtime.view(req).priority == runtime.priority(req)


def test_the_default_policy_patches_nothing_on_the_step_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(HookRegistry, "_hooks", type(HookRegistry._hooks)(list))
    monkeypatch.setenv("SCHEDKIT_POLICY", "fcfs")
    plugin.load()
    assert set(HookRegistry._hooks) == {f"{patches.SCHEDULER}.__init__"}


def test_a_driver_clock_reaches_the_engine_view_and_arrivals() -> None:
    from schedkit import PolicyFacade

    scheduler = _fake_scheduler()
    runtime = SglangRuntime(scheduler, PolicyFacade.from_config({"policy": ["fcfs"]}))
    runtime.engine.use_clock(lambda: 0.5, lambda req: 0.25)
    view = runtime.view(_req(None))
    assert (runtime.engine.clock, view.arrival_time) == (0.5, 0.25)


@pytest.mark.parametrize("field", ["tenant", "priority", "slo_ttft_ms", "slo_tpot_ms"])
def test_a_policy_cannot_write_to_a_request_view(field: str) -> None:
    from schedkit_sglang.views import SglangRequestView

    view = SglangRequestView(_req(3, tenant="acme", slo_ttft_ms=500), 0.0)
    with pytest.raises(AttributeError):
        setattr(view, field, 1)
    assert (view.tenant, view.priority) == ("acme", 3)


@pytest.mark.parametrize("field", ["block_hash", "depth", "last_access", "num_hits"])
def test_a_policy_cannot_write_to_a_node_view(field: str) -> None:
    from types import SimpleNamespace

    from schedkit_sglang.views import SglangNodeView

    root = SimpleNamespace(parent=None)
    node = SimpleNamespace(id=7, parent=SimpleNamespace(parent=root), key=[1, 2, 3],
                           last_access_time=4.0, hit_count=2)  # fmt: skip
    view = SglangNodeView(node)
    with pytest.raises(AttributeError):
        setattr(view, field, 5)
    assert (view.block_hash, view.depth, view.num_hits, view.num_tokens) == (7, 1, 2, 3)


STEP_PATCHES = ("get_next_batch_to_run", "run_batch", "process_batch_result")


def test_record_steps_turns_on_the_step_patches_even_for_fcfs(tmp_path: Path) -> None:
    from schedkit import PolicyFacade

    facade = PolicyFacade.from_config("fcfs")
    assert list(patches.plan(facade)) == [f"{patches.SCHEDULER}.__init__"]  # stock loop
    planned = patches.plan(facade, record_steps=str(tmp_path / "steps.csv"))
    assert all(f"{patches.SCHEDULER}.{name}" in planned for name in STEP_PATCHES)
    init = planned[f"{patches.SCHEDULER}.__init__"][0]
    scheduler = _fake_scheduler()
    init(lambda self: None, scheduler)
    runtime = scheduler.schedkit  # type: ignore[attr-defined]
    assert runtime.recorder is not None and runtime.tracks_steps
    runtime.close()
    header = (tmp_path / "steps.csv").read_text().splitlines()
    assert header[0].startswith("# schedkit-steps") and '"engine": "sglang"' in header[0]


@pytest.mark.parametrize(
    ("ranks", "written"),
    [
        ((0, 0, 0, 1), "steps.csv"),
        ((1, 0, 0, 1), None),  # a TP rank beyond 0 runs the same batches: it writes nothing
        ((0, 1, 0, 1), None),
        ((0, 0, 2, 4), "steps.dp2.csv"),  # each data-parallel replica its own file
    ],
)
def test_only_rank_zero_of_each_replica_records(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ranks: tuple[int, int, int, int],
    written: str | None,
) -> None:
    from schedkit_sglang import runtime

    monkeypatch.setattr(runtime, "_ranks", lambda: ranks)
    recorder = runtime.recorder_for(_fake_scheduler(), str(tmp_path / "steps.csv"))
    assert (recorder is None) == (written is None)
    if recorder is not None:
        recorder.close()
        assert recorder.path == tmp_path / str(written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([written] if written else [])


def test_the_scheduler_patches_load_no_bench_simulator_or_numpy_of_ours() -> None:
    """Issue #36: what SGLang's scheduler process imports of schedkit is the kit, the core
    and the adapter's runtime, not the adapter's harness (timed in
    benchmarks/speed/README.md)."""
    import os
    from pathlib import Path

    from schedkit.testing.imports import HARNESS_PACKAGES, loaded_by

    import schedkit_sglang

    site = Path(schedkit_sglang.__file__).parent / "_cpu_site"  # torchvision stand-ins
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    try:
        loaded = loaded_by("sglang.srt.managers.scheduler", "schedkit_sglang.patches:plan")
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    modules = loaded["modules"]
    assert isinstance(modules, list) and "schedkit_sglang.runtime" in modules
    harness = [m for m in modules if m.startswith((*HARNESS_PACKAGES, "schedkit_sglang.harness"))]
    assert harness == [], harness
    assert not any(m == "numpy" or m.startswith("numpy.") for m in modules)


class _Evicts(Policy):
    @hookimpl
    def select_evictions(self, candidates: list[object], num_blocks: int) -> list[object]:
        return candidates


@pytest.mark.parametrize(
    ("mode", "cacheless", "warned"),
    [("decode", True, True), ("decode", False, False), ("prefill", True, False)],
)
def test_a_cacheless_decode_server_warns_that_eviction_hooks_never_run(
    mode: str, cacheless: bool, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from schedkit import PolicyFacade

    args = SimpleNamespace(disaggregation_mode=mode, disable_radix_cache=cacheless)
    with caplog.at_level(logging.WARNING, logger="schedkit.sglang"):
        patches._warn_decode_cache(
            SimpleNamespace(server_args=args), PolicyFacade([("e", _Evicts())])
        )
        patches._warn_decode_cache(SimpleNamespace(server_args=args), PolicyFacade([]))
    said = [r.getMessage() for r in caplog.records if "never run here" in r.getMessage()]
    assert len(said) == int(warned), said
