"""``schedkit serve sglang``'s command line and environment, without launching SGLang."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from schedkit import load_config
from schedkit.errors import SchedkitError

from schedkit_sglang.config import resolve_config
from schedkit_sglang.cpu import SITE_DIR
from schedkit_sglang.serve import build_command, build_environ, wants_metrics_dir

ARGS = ["--model-path", "m", "--port", "30000"]


def test_command_runs_sglangs_launcher_with_the_args_unchanged() -> None:
    command = build_command(load_config("priority"), ARGS, python="py")
    assert command == ["py", "-m", "sglang.launch_server", *ARGS]
    assert build_command(load_config("fcfs"), ARGS)[0] == sys.executable


def test_eviction_policy_adds_the_schedkit_radix_cache_backend() -> None:
    command = build_command(load_config("priority+lfu"), ARGS, python="py")
    assert command[3:] == [*ARGS, "--radix-cache-backend", "schedkit"]
    for given in (["--radix-cache-backend", "schedkit"], ["--radix-cache-backend=schedkit"]):
        command = build_command(load_config("lfu"), [*ARGS, *given], python="py")
        assert command[3:] == [*ARGS, *given]  # already there: not added twice


@pytest.mark.parametrize(
    "given", [["--radix-cache-backend", "flexkv"], ["--radix-cache-backend=flexkv"]]
)
def test_eviction_policy_refuses_another_radix_cache_backend(given: list[str]) -> None:
    with pytest.raises(SchedkitError, match="--radix-cache-backend schedkit") as info:
        build_command(load_config("lfu"), [*ARGS, *given])
    assert "flexkv" in str(info.value)


def test_eviction_policy_refuses_a_disabled_radix_cache() -> None:
    with pytest.raises(SchedkitError, match="--disable-radix-cache"):
        build_command(load_config("slru"), [*ARGS, "--disable-radix-cache"])


def test_other_policies_leave_the_radix_cache_flags_alone() -> None:
    args = [*ARGS, "--radix-cache-backend", "flexkv", "--disable-radix-cache"]
    assert build_command(load_config("priority"), args, python="py")[3:] == args


def test_option_without_value_is_refused() -> None:
    with pytest.raises(SchedkitError, match="--radix-cache-backend needs a value"):
        build_command(load_config("lfu"), [*ARGS, "--radix-cache-backend"])


def test_environ_selects_the_config_for_the_scheduler_processes() -> None:
    config = load_config({"policy": "slo+vtc", "options": {"vtc": {}}})
    env = build_environ(config, ARGS, {"HOME": "/h"})
    assert env["HOME"] == "/h"
    assert resolve_config(env) == config
    assert json.loads(env["SCHEDKIT_CONFIG"])["policy"] == ["slo", "vtc"]
    assert "SGLANG_USE_CPU_ENGINE" not in env and "PYTHONPATH" not in env  # not on CPU
    assert "PROMETHEUS_MULTIPROC_DIR" not in env


def test_record_steps_reaches_the_scheduler_processes(tmp_path: Path) -> None:
    steps = str(tmp_path / "steps.csv")
    config = load_config("fcfs").model_copy(update={"record_steps": steps})
    resolved = resolve_config(build_environ(config, ARGS, {}))
    assert resolved is not None and resolved.record_steps == steps


def test_environ_does_not_change_the_callers_mapping() -> None:
    caller = {"PYTHONPATH": "/x"}
    build_environ(load_config("fcfs"), [*ARGS, "--device", "cpu"], caller, metrics_dir="/m")
    assert caller == {"PYTHONPATH": "/x"}


@pytest.mark.parametrize(
    "selection",
    [
        {"SCHEDKIT_POLICY": "priority"},
        {"SCHEDKIT_CONFIG": '{"policy": ["priority"]}'},
        {"SCHEDKIT_POLICY": "priority", "SCHEDKIT_OPTIONS": "{}"},
    ],
)
def test_environ_accepts_the_same_selection_already_set(selection: dict[str, str]) -> None:
    config = load_config("priority")
    env = build_environ(config, ARGS, selection)
    assert "SCHEDKIT_POLICY" not in env and "SCHEDKIT_OPTIONS" not in env
    assert resolve_config(env) == config


@pytest.mark.parametrize(
    "selection",
    [
        {"SCHEDKIT_POLICY": "fcfs"},
        {"SCHEDKIT_CONFIG": '{"policy": ["priority", "vtc"]}'},
        {"SCHEDKIT_OPTIONS": '{"priority": {}}'},  # options without a policy
    ],
)
def test_environ_refuses_a_different_selection_already_set(selection: dict[str, str]) -> None:
    with pytest.raises(SchedkitError):
        build_environ(load_config("priority"), ARGS, selection)


def test_environ_ignores_empty_selection_variables() -> None:
    env = build_environ(load_config("priority"), ARGS, {"SCHEDKIT_POLICY": " "})
    assert resolve_config(env) == load_config("priority")


@pytest.mark.parametrize("device", [["--device", "cpu"], ["--device=cpu"], ["--device", "CPU"]])
def test_environ_on_cpu_adds_the_stand_ins(device: list[str]) -> None:
    env = build_environ(load_config("fcfs"), [*ARGS, *device], {})
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["PYTHONPATH"] == str(SITE_DIR)
    assert (Path(env["PYTHONPATH"]) / "sitecustomize.py").is_file()


def test_environ_on_cpu_keeps_the_callers_pythonpath_after_the_site_dir() -> None:
    caller = {"PYTHONPATH": os.pathsep.join(["/a", str(SITE_DIR), "", "/b"])}
    env = build_environ(load_config("fcfs"), [*ARGS, "--device", "cpu"], caller)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/a", "/b"]


def test_environ_cpu_engine_already_set_counts_as_cpu() -> None:
    env = build_environ(load_config("fcfs"), ARGS, {"SGLANG_USE_CPU_ENGINE": "1"})
    assert env["PYTHONPATH"] == str(SITE_DIR)
    gpu = build_environ(load_config("fcfs"), [*ARGS, "--device", "cuda"], {})
    assert "PYTHONPATH" not in gpu and "SGLANG_USE_CPU_ENGINE" not in gpu


def test_metrics_dir_only_with_metrics_on_and_none_set() -> None:
    metrics = [*ARGS, "--enable-metrics"]
    assert wants_metrics_dir(metrics, {})
    assert not wants_metrics_dir(ARGS, {})
    assert not wants_metrics_dir(metrics, {"PROMETHEUS_MULTIPROC_DIR": "/mine"})
    config = load_config("fcfs")
    env = build_environ(config, metrics, {}, metrics_dir="/fresh")
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/fresh"
    mine = {"PROMETHEUS_MULTIPROC_DIR": "/mine"}
    assert (
        build_environ(config, metrics, mine, metrics_dir="/fresh")["PROMETHEUS_MULTIPROC_DIR"]
        == "/mine"
    )


def test_an_sglang_plugins_allow_list_gets_schedkit_added() -> None:
    config = load_config({"policy": ["priority"]})
    env = build_environ(config, ["--model-path", "m"], {"SGLANG_PLUGINS": "other"})
    assert env["SGLANG_PLUGINS"] == "other,schedkit"
    env = build_environ(config, ["--model-path", "m"], {})
    assert "SGLANG_PLUGINS" not in env
