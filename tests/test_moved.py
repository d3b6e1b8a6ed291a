"""Modules that moved in issue #36 keep working at their old names, with a warning."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

MOVED = {
    "schedkit.sim.workloads": ("schedkit.workload", ["TraceRequest", "Workload", "load_workload"]),
    "schedkit.sim.trace_formats": ("schedkit.workload.source", ["TraceSource", "parse_jsonl"]),
    "schedkit.sim.azure_csv": ("schedkit.workload.formats.azure_csv", ["parse_azure_csv"]),
    "schedkit.sim.azure_arrow": ("schedkit.workload.formats.azure_arrow", []),
    "schedkit.sim.burstgpt": ("schedkit.workload.formats.burstgpt", []),
    "schedkit.sim.text_requests": ("schedkit.workload.formats.prompt_text", []),
    "schedkit.sim.synthetic": ("schedkit.workload.synthetic", ["spec_workload"]),
    "schedkit.sim.limits": ("schedkit.workload.limits", ["MAX_TOKENS"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_warns_and_gives_the_same_objects(old: str) -> None:
    new, names = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    for name in names:
        assert getattr(module, name) is not None
    if not names:  # moved whole: the very module
        assert module is importlib.import_module(new)
    sys.modules.pop(old, None)


# Modules moved whole in part 5 of issue #36 (one name per concept).
PART5_MODULES = {
    "schedkit.adapter.metadata": "schedkit.metadata",
    "schedkit.bench.replay": "schedkit.bench.engine_requests",
}


@pytest.mark.parametrize("old", sorted(PART5_MODULES))
def test_a_renamed_module_warns_and_is_the_new_module(old: str) -> None:
    new = PART5_MODULES[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    sys.modules.pop(old, None)


# Names renamed in part 5 of issue #36: module, old name, the object it still gives.
RENAMED = {
    "ReplayArm": ("schedkit.bench.real_arm", "schedkit.bench.real_arm:RealArm"),
    "schedkit.adapter.ReplayArm": ("schedkit.adapter", "schedkit.bench.real_arm:RealArm"),
    "replay": ("schedkit.bench.runner", "schedkit.bench.runner:simulate"),
    "profile_dict": ("schedkit.sim.profiles", "dataclasses:asdict"),
    "sglang SchedkitRuntime": ("schedkit_sglang.runtime", "schedkit_sglang.runtime:SglangRuntime"),
    "vllm SchedkitRuntime": ("schedkit_vllm.runtime", "schedkit_vllm.runtime:VllmRuntime"),
}


def _resolve(target: str) -> object:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("case", sorted(RENAMED))
def test_an_old_name_warns_and_gives_the_new_object(case: str) -> None:
    module_name, target = RENAMED[case]
    if module_name.startswith("schedkit_"):  # an adapter: runs in that engine's venv
        pytest.importorskip(module_name)
    module = importlib.import_module(module_name)
    old = case.rpartition(" ")[2].rpartition(".")[2]
    with pytest.warns(DeprecationWarning, match=old):
        found = getattr(module, old)
    assert found is _resolve(target)


@pytest.mark.parametrize(
    "module_name", ["schedkit.bench.real_arm", "schedkit.bench.runner", "schedkit.sim.profiles"]
)
def test_a_missing_name_still_raises_attribute_error(module_name: str) -> None:
    module = importlib.import_module(module_name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = module.no_such_name


def test_profile_dict_still_gives_the_profiles_fields() -> None:
    from schedkit.sim import profiles

    profile = profiles.get_model("Llama-3-8B")
    with pytest.warns(DeprecationWarning, match="dataclasses.asdict"):
        profile_dict: Any = profiles.profile_dict
    fields = profile_dict(profile)
    assert fields["name"] == "Llama-3-8B"


def test_compare_arms_ignores_the_old_bootstrap_settings_with_a_warning() -> None:
    from schedkit.bench.compare import compare_arms
    from schedkit.records import RequestRecord, RunResult

    def run(policy: str, ttft: float) -> RunResult:
        records = [
            RequestRecord(
                request_id=f"r{i}", tenant="a", priority=0, arrival_s=i * 0.1,
                prompt_tokens=100, max_tokens=10, output_tokens=10, finish_reason="length",
                scheduled_s=i * 0.1, first_token_s=i * 0.1 + ttft * (1 + i % 7),
                finish_s=i * 0.1 + ttft * (1 + i % 7) + 0.9,
            )
            for i in range(400)
        ]  # fmt: skip
        return RunResult(policy=policy, records=records, duration_s=41.0)

    runs = [run("a", 0.1), run("b", 0.2)]
    expected = compare_arms(runs, slo_ttft_ms=None, slo_tpot_ms=None)
    with pytest.warns(DeprecationWarning, match="ignores seed and n_boot"):
        got = compare_arms(runs, slo_ttft_ms=None, slo_tpot_ms=None, seed=3, n_boot=10)
    assert got == expected
