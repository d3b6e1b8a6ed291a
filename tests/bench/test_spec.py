"""The bench spec: nested groups, one default per setting, and the command line derived
from it (issue #36)."""

from __future__ import annotations

import typing
from typing import Any

import pytest
import typer.main
from pydantic import ValidationError

from schedkit.bench.settings import EngineSettings, EngineSpec
from schedkit.bench.spec import GROUPS, BenchSpec
from schedkit.cli.bench import register


def test_flat_settings_land_in_their_groups() -> None:
    flat = BenchSpec(
        workload="azure-conv", policies=["fcfs"], max_num_seqs=64, slo_ttft_ms=500.0,
        window=(10.0, 20.0), targets=["http://127.0.0.1:1"], jobs=2,
    )  # fmt: skip
    nested = BenchSpec(
        workload={"name": "azure-conv", "window": (10.0, 20.0)},
        policies=["fcfs"],
        settings={"max_num_seqs": 64},
        stats={"slo_ttft_ms": 500.0},
        live={"targets": ["http://127.0.0.1:1"]},
        jobs=2,
    )
    assert flat == nested
    assert flat.settings.max_num_seqs == 64 and flat.workload.name == "azure-conv"
    assert flat.stats.slo_ttft_ms == 500.0 and flat.live.targets == ["http://127.0.0.1:1"]


def test_a_flat_read_still_works_with_a_warning() -> None:
    spec = BenchSpec(workload="azure-conv", policies=["fcfs"], max_num_seqs=64)
    with pytest.warns(DeprecationWarning, match="settings.max_num_seqs"):
        assert typing.cast(Any, spec).max_num_seqs == 64
    with pytest.raises(AttributeError, match="no_such_setting"):
        _ = typing.cast(Any, spec).no_such_setting


def test_replace_and_with_settings_validate() -> None:
    spec = BenchSpec(workload="azure-conv", policies=["fcfs"])
    assert spec.replace(max_requests=10).workload.max_requests == 10
    assert spec.replace(max_requests=10).workload.name == "azure-conv"
    assert spec.with_settings({"tp": 2}).settings.tp == 2 and spec.settings.tp == 1
    assert spec.with_settings({}) is spec
    with pytest.raises(ValidationError, match="max_num_seqs"):
        spec.replace(max_num_seqs=0)
    with pytest.raises(ValidationError, match="unknown_setting"):
        BenchSpec(workload="azure-conv", policies=["fcfs"], unknown_setting=1)


def test_arm_settings_mirror_the_engine_spec_without_defaults() -> None:
    spec_fields, arm_fields = EngineSpec.model_fields, EngineSettings.model_fields
    assert list(arm_fields) == [name for name in spec_fields if name != "mixed_prefill"]
    arm_schema = EngineSettings.model_json_schema()["properties"]
    spec_schema = EngineSpec.model_json_schema()["properties"]
    for name, arm in arm_fields.items():
        assert arm.default is None, name
        # the same type and constraints, or none
        assert _accepts(arm_schema[name]) == _accepts(spec_schema[name]), name


def _accepts(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """What a property's schema accepts besides null, without its title and default."""
    options = schema.get("anyOf", [schema])
    return [
        {k: v for k, v in option.items() if k not in ("title", "default", "description")}
        for option in options
        if option != {"type": "null"}
    ]
    with pytest.raises(ValidationError):
        EngineSettings(max_num_seqs=0)
    with pytest.raises(ValidationError):
        EngineSpec(max_num_seqs=0)


def _bench_command() -> Any:
    app = typer.Typer()
    app.command("x")(lambda: None)  # a group, as schedkit's app is
    register(app)
    command: Any = typer.main.get_command(app)
    return command.commands["bench"]


def test_every_setting_is_an_option_with_the_specs_default_and_help() -> None:
    params = {p.name: p for p in _bench_command().params}
    # the command line spells these otherwise (vLLM's names, repeated flags, text)
    renamed = {"policies": "policy", "arms": "arm", "targets": "target",
               "verdict_metrics": "metrics", "prefix_caching": "no_prefix_caching",
               "name": "workload"}  # fmt: skip
    checked = 0
    models: list[tuple[str, Any]] = [("", BenchSpec), *GROUPS.items()]
    for group, model in models:
        for name, field in model.model_fields.items():
            if name in GROUPS or (group, name) in (
                ("workload", "rate_scale"), ("workload", "all_at_once"),
            ):  # fmt: skip
                continue  # a group; --rate-scale is the run's, and so is --request-rate inf
            param = params[renamed.get(name, name)]
            assert param.help == field.description, name
            if name not in renamed and name not in ("window", "record_steps", "goodput"):
                default = field.get_default(call_default_factory=True)
                if name in ("percentile_metrics", "metric_percentiles"):  # as vLLM writes it
                    default = ",".join(f"{v:g}" if isinstance(v, float) else v for v in default)
                assert param.default == default or param.required, name
            checked += 1
    assert checked == 52  # every field of BenchSpec and its groups but the run's


def test_a_bad_setting_names_its_flag() -> None:
    from typer.testing import CliRunner

    app = typer.Typer()
    app.command("x")(lambda: None)
    register(app)
    result = CliRunner().invoke(
        app, ["bench", "--workload", "azure-conv", "--policy", "fcfs", "--out", "o",
              "--max-num-seqs", "0", "--slo-ttft-ms", "-1"],
    )  # fmt: skip
    assert result.exit_code != 0
    message = str(result.exception)
    assert message == (
        "--max-num-seqs: 0 is not accepted; it takes an integer greater than 0;"
        " --slo-ttft-ms: -1.0 is not accepted; it takes a number greater than 0"
    )
