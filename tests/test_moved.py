"""Modules that moved in issue #36 keep working at their old names, with a warning."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

from schedkit._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_warns_and_gives_the_new_objects(old: str) -> None:
    targets = MOVED[old]
    if not targets[0].startswith("schedkit."):  # an adapter's: runs in that engine's venv
        pytest.importorskip(targets[0].partition(".")[0])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {targets[0]}"):
        module = importlib.import_module(old)
    if len(targets) == 1:  # moved whole: the very module, so patching either patches both
        assert module is importlib.import_module(targets[0])
    else:  # split: every public name of every part, the same objects
        for target in targets:
            part = importlib.import_module(target)
            for name in getattr(part, "__all__", []):
                assert getattr(module, name) is getattr(part, name), (target, name)
    sys.modules.pop(old, None)


def test_an_old_module_that_is_now_a_package_keeps_its_names_with_a_warning() -> None:
    from schedkit.bench.report.render import write_report
    from schedkit.bench.stats.estimators import summary
    from schedkit.bench.sweep.spec import SweepSpec

    for package, name, obj in [
        ("schedkit.bench.stats", "summary", summary),
        ("schedkit.bench.report", "write_report", write_report),
        ("schedkit.bench.sweep", "SweepSpec", SweepSpec),
    ]:
        with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved"):
            assert getattr(importlib.import_module(package), name) is obj
        with pytest.raises(AttributeError, match="no_such_name"):
            _ = importlib.import_module(package).no_such_name


def test_the_moved_modules_left_no_file_behind() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # schedkit's modules at the root, each adapter's in its folder (schedkit_vllm: vllm)
    homes = [root, *(init.parent.parent for init in root.glob("adapters/*/schedkit_*/__init__.py"))]
    left = [
        old
        for old in MOVED
        if any((home / (old.replace(".", "/") + ".py")).exists() for home in homes)
    ]
    assert not left, f"a moved module's old file is back (the finder would never serve it): {left}"


def test_the_edge_and_the_cli_packages_keep_the_modules_public_names() -> None:
    import schedkit.cli
    import schedkit.cli.commands
    import schedkit.edge
    import schedkit.edge.middleware

    assert schedkit.edge.TrustMiddleware is schedkit.edge.middleware.TrustMiddleware
    assert schedkit.cli.main is schedkit.cli.commands.main  # the console script's entry point


# Names renamed in part 5 of issue #36: module, old name, the object it still gives.
RENAMED = {
    "ReplayArm": ("schedkit.bench.engines.real_arm", "schedkit.bench.engines.real_arm:RealArm"),
    "schedkit.adapter.ReplayArm": ("schedkit.adapter", "schedkit.bench.engines.real_arm:RealArm"),
    "replay": ("schedkit.bench.runner", "schedkit.bench.runner:simulate"),
    "profile_dict": ("schedkit.sim.cost.profiles", "dataclasses:asdict"),
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
    "module_name",
    ["schedkit.bench.engines.real_arm", "schedkit.bench.runner", "schedkit.sim.cost.profiles"],
)
def test_a_missing_name_still_raises_attribute_error(module_name: str) -> None:
    module = importlib.import_module(module_name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = module.no_such_name


def test_profile_dict_still_gives_the_profiles_fields() -> None:
    from schedkit.sim.cost import profiles

    profile = profiles.get_model("Llama-3-8B")
    with pytest.warns(DeprecationWarning, match="dataclasses.asdict"):
        profile_dict: Any = profiles.profile_dict
    fields = profile_dict(profile)
    assert fields["name"] == "Llama-3-8B"


def test_compare_arms_ignores_the_old_bootstrap_settings_with_a_warning() -> None:
    from schedkit.bench.stats.compare import compare_arms
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
