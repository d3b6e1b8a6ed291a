"""Messages for a misspelt or refused name or value (#38 item 10): each names the option,
the value given and what is accepted, suggests a close match, and carries none of the
validation library's wording."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from schedkit import PolicyFacade, load_config
from schedkit.bench.arms import parse_arm
from schedkit.bench.spec import BenchSpec
from schedkit.errors import PolicyConfigError, SchedkitError, UnknownPolicyError, did_you_mean
from schedkit.plugins import PolicyEntry, PolicyRegistry
from schedkit.testing import check_policy
from schedkit.validation import accepted, problem, problems
from schedkit.workload import load_workload

# A policy with an option of every kind an error can be about.
KNOBS = """
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schedkit import Policy, PolicyOptions


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttft_ms: float | None = Field(default=None, gt=0)


class Plugin(Policy):
    \"\"\"Implements nothing; its options have every shape.\"\"\"

    class Options(PolicyOptions):
        soft_cap_tokens: int = Field(default=8, ge=1, le=1000)
        mode: Literal["fast", "fair"] = "fast"
        budget_ms: float | None = Field(default=None, gt=0, le=60_000)
        tenants: dict[str, Target] = Field(default_factory=dict)
        weights: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
        labels: list[str] = Field(default_factory=list)
        either: Annotated[int, Field(ge=0)] | Literal["all", "none"] = "all"
        strict: bool = False
        block: int = 16

        @field_validator("block")
        @classmethod
        def _power_of_two(cls, value: int) -> int:
            if value < 1 or value & (value - 1):
                raise ValueError("it must be a power of two")
            return value

        @model_validator(mode="after")
        def _fair_needs_tenants(self) -> "Plugin.Options":
            if self.mode == "fair" and not self.tenants:
                raise ValueError("mode 'fair' needs tenants to be fair between")
            return self
"""
OPTIONS = "soft_cap_tokens, mode, budget_ms, tenants, weights, labels, either, strict, block"
LIBRARY_WORDING = ("Input should", "Value error", "Extra inputs", "pydantic", "further information")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """``knobs`` installed: a dist-info and its module, in a folder for sys.path."""
    dist = tmp_path / "schedkit_knobs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: schedkit-knobs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[schedkit.policies]\nknobs = knobs_policy:Plugin\n")
    (tmp_path / "knobs_policy.py").write_text(textwrap.dedent(KNOBS))
    return tmp_path


@pytest.fixture
def registry(site: Path, monkeypatch: pytest.MonkeyPatch) -> PolicyRegistry:
    monkeypatch.syspath_prepend(str(site))
    return PolicyRegistry(
        [
            PolicyEntry("fcfs", "schedkit", "0", "schedkit.policies.builtin:FCFS"),
            PolicyEntry("knobs", "schedkit-knobs", "1.0", "knobs_policy:Plugin"),
        ]
    )


def refusal(registry: PolicyRegistry, options: dict[str, object], policy: str = "knobs") -> str:
    config = {"policy": policy, "options": {policy: options}}
    with pytest.raises(PolicyConfigError) as excinfo:
        PolicyFacade.from_config(config, registry=registry)
    message = str(excinfo.value)
    assert not [words for words in LIBRARY_WORDING if words in message], message
    return message


# -- a policy's options ---------------------------------------------------------------


def test_an_unknown_option_lists_the_options_and_the_closest(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"soft_cap": 3}) == (
        f"policy 'knobs': unknown option 'soft_cap'; valid options: {OPTIONS}"
        " (did you mean 'soft_cap_tokens'?)"
    )
    assert refusal(registry, {"zzz": 3}) == (
        f"policy 'knobs': unknown option 'zzz'; valid options: {OPTIONS}"
    )
    assert refusal(registry, {"x": 1}, policy="fcfs") == (
        "policy 'fcfs': unknown option 'x'; it takes no options"
    )


def test_an_unknown_field_inside_an_option_lists_its_fields(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"tenants": {"gold": {"ttft": 500}}}) == (
        "policy 'knobs': unknown field 'tenants.gold.ttft'; valid fields of tenants.gold:"
        " ttft_ms (did you mean 'ttft_ms'?)"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"soft_cap_tokens": 0}, "soft_cap_tokens: 0 is not accepted; it takes an integer from 1 to 1000"),
        ({"soft_cap_tokens": "many"}, "soft_cap_tokens: 'many' is not accepted; it takes an integer from 1 to 1000"),
        ({"mode": "slow"}, "mode: 'slow' is not accepted; it takes 'fast' or 'fair'"),
        ({"mode": "fiar"}, "mode: 'fiar' is not accepted; it takes 'fast' or 'fair' (did you mean 'fair'?)"),
        ({"budget_ms": -1}, "budget_ms: -1 is not accepted; it takes a number greater than 0 and at most 60000"),
        ({"weights": {"a": 0}}, "weights.a: 0 is not accepted; it takes a number greater than 0"),
        ({"tenants": 3}, "tenants: 3 is not accepted; it takes an object mapping names to an object with the fields ttft_ms"),
        ({"tenants": {"gold": {"ttft_ms": "soon"}}}, "tenants.gold.ttft_ms: 'soon' is not accepted; it takes a number greater than 0"),
        ({"labels": 3}, "labels: 3 is not accepted; it takes a list of strings"),
        ({"labels": [1]}, "labels.0: 1 is not accepted; it takes a string"),
        ({"either": [1]}, "either: [1] is not accepted; it takes an integer of at least 0, or 'all' or 'none'"),
        ({"either": "al"}, "either: 'al' is not accepted; it takes an integer of at least 0, or 'all' or 'none' (did you mean 'all'?)"),
        ({"strict": "maybe"}, "strict: 'maybe' is not accepted; it takes true or false"),
        ({"block": 12}, "block: 12 is not accepted; it must be a power of two"),
    ],
    ids=[
        "bound", "type", "choice", "close-choice", "optional", "mapping", "object", "nested",
        "list", "list-item", "union", "union-close", "bool", "field-validator",
    ],
)  # fmt: skip
def test_a_bad_value_names_the_option_the_value_and_what_is_accepted(
    registry: PolicyRegistry, options: dict[str, object], message: str
) -> None:
    assert refusal(registry, options) == f"policy 'knobs' option {message}"


def test_a_validator_speaks_in_its_own_words(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"mode": "fair"}) == (
        "policy 'knobs': mode 'fair' needs tenants to be fair between"
    )


def test_every_problem_is_named_once(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"mode": "slow", "soft_cap": 1}) == (
        "policy 'knobs' option mode: 'slow' is not accepted; it takes 'fast' or 'fair';"
        f" policy 'knobs': unknown option 'soft_cap'; valid options: {OPTIONS}"
        " (did you mean 'soft_cap_tokens'?)"
    )


def test_the_testing_kit_refuses_options_in_the_same_words(site: Path) -> None:
    sys.path.insert(0, str(site))
    try:
        from knobs_policy import Plugin  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(site))
    with pytest.raises(PolicyConfigError) as excinfo:
        check_policy(Plugin, {"soft_cap": 1})
    assert str(excinfo.value).startswith(
        "policy 'Plugin': unknown option 'soft_cap'; valid options:"
    )
    assert "(did you mean 'soft_cap_tokens'?)" in str(excinfo.value)


def test_the_command_shows_the_message_alone(site: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    for options, message in [
        (
            '{"knobs": {"soft_cap": 3}}',
            f": unknown option 'soft_cap'; valid options: {OPTIONS} (did",
        ),
        ('{"knobs": {"mode": 3}}', " option mode: 3 is not accepted; it takes 'fast' or 'fair'"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "schedkit", "contract", "knobs", "--options", options],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, "COLUMNS": "80", "TERM": "dumb"},
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        text = " ".join(proc.stderr.split())
        assert text.startswith(f"error: policy 'knobs'{message}"), proc.stderr
        assert not [words for words in LIBRARY_WORDING if words in text], proc.stderr
        assert "Traceback" not in proc.stderr


# -- one mechanism: what a value may be, whoever asks ------------------------------------


@pytest.mark.parametrize(
    ("annotation", "words"),
    [
        (int, "an integer"),
        (float, "a number"),
        (bool, "true or false"),
        (str, "a string"),
        (Annotated[int, Field(gt=0)], "an integer greater than 0"),
        (Annotated[int, Field(ge=1)], "an integer of at least 1"),
        (Annotated[float, Field(ge=0, le=1)], "a number from 0 to 1"),
        (Annotated[float, Field(gt=0, lt=1)], "a number greater than 0 and less than 1"),
        (Annotated[int, Field(le=9)] | None, "an integer of at most 9"),
        (Literal["fast", "fair"], "'fast' or 'fair'"),
        (Literal["a", "b", "c"] | None, "'a', 'b' or 'c'"),
        (int | str, "an integer or a string"),
        (dict[str, Any], "an object"),
        (dict[str, int], "an object mapping names to integers"),
        (list[float], "a list of numbers"),
        (Annotated[list[str], Field(min_length=1)], "a list of strings with at least 1 item"),
        (list[Literal["x", "y"]], "a list, each item 'x' or 'y'"),
        (Annotated[str, Field(min_length=1, max_length=8)], "a string with 1 to 8 characters"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_what_a_value_may_be_in_words(annotation: Any, words: str) -> None:
    assert accepted(annotation) == words


class Loose(BaseModel):
    """Where an error's location leads past what the model's types say (a key's own type)."""

    table: dict[str, int] = Field(default_factory=dict)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            {"type": "greater_than", "loc": ("table", "a", "[key]"), "input": 0, "ctx": {"gt": 0}},
            "table.a.[key]: 0 is not accepted; it takes a number greater than 0",
        ),
        (
            {
                "type": "literal_error", "loc": ("table", "a", "[key]"), "input": "fp7",
                "ctx": {"expected": "'auto', 'fp8' or 'fp8_e4m3'"},
            },
            "table.a.[key]: 'fp7' is not accepted; it takes 'auto', 'fp8' or 'fp8_e4m3'"
            " (did you mean 'fp8'?)",
        ),
        (
            {"type": "int_parsing", "loc": ("table", "a", "[key]"), "input": "x"},
            "table.a.[key]: 'x' is not accepted; it takes an integer",
        ),
        (
            {"type": "extra_forbidden", "loc": ("tabel",), "input": 1},
            "unknown key 'tabel'; valid keys: table (did you mean 'table'?)",
        ),
    ],
    ids=["bound", "choice", "type", "unknown"],
)  # fmt: skip
def test_where_the_type_is_not_followed_the_error_kind_says_it(
    error: dict[str, Any], words: str
) -> None:
    error = {"msg": "Input should be something", **error}
    assert problem(error, Loose, lambda loc: ".".join(map(str, loc))) == words


def test_flags_arm_keys_config_keys_and_options_speak_alike(registry: PolicyRegistry) -> None:
    """The same refused choice, from four places: the same clause after each one's name."""
    clause = (
        "'fp7' is not accepted; it takes 'auto', 'bfloat16', 'float16', 'fp8', 'fp8_e4m3' or"
        " 'fp8_e5m2' (did you mean 'fp8'?)"
    )
    with pytest.raises(SchedkitError) as arm:
        parse_arm("name=a,kv_cache_dtype=fp7")
    assert str(arm.value) == f"--arm 'a': kv_cache_dtype: {clause}"
    with pytest.raises(ValidationError) as spec:
        BenchSpec(workload="azure-conv", policies=["fcfs"], kv_cache_dtype="fp7")
    flag = problems(spec.value, BenchSpec, lambda loc: "--kv-cache-dtype" if loc else "")
    assert flag == f"--kv-cache-dtype: {clause}"
    assert refusal(registry, {"mode": "fiar"}).endswith(
        ": 'fiar' is not accepted; it takes 'fast' or 'fair' (did you mean 'fair'?)"
    )
    with pytest.raises(PolicyConfigError) as config:
        load_config({"policy": "fcfs", "trust": {"trace": "bodi"}})
    assert str(config.value).endswith(
        "trust.trace: 'bodi' is not accepted; it takes 'trusted' or 'body' (did you mean 'body'?)"
    )


# -- policy and workload names --------------------------------------------------------


def test_a_misspelt_policy_name_gets_the_closest_installed_ones() -> None:
    installed = ["fcfs", "prefix-aware", "prefix-aware-queued", "priority", "vtc"]
    registry = PolicyRegistry(
        [PolicyEntry(name, "schedkit", "0", "schedkit.policies.builtin:FCFS") for name in installed]
    )
    for name, hint in [
        ("fcsf", " (did you mean 'fcfs'?)"),
        ("FCFS", " (did you mean 'fcfs'?)"),
        ("prefix-awar", " (did you mean 'prefix-aware'?)"),
        ("prefix-aware-q", " (did you mean 'prefix-aware' or 'prefix-aware-queued'?)"),
        ("zzzz", ""),
    ]:
        with pytest.raises(UnknownPolicyError) as excinfo:
            PolicyFacade.from_config(name, registry=registry)
        assert str(excinfo.value).startswith(
            f"unknown policy '{name}'{hint}; installed policies: {', '.join(installed)}."
        )


def test_a_name_far_from_every_choice_gets_no_suggestion() -> None:
    assert did_you_mean("fcsf", ["fcfs"]) == " (did you mean 'fcfs'?)"
    assert did_you_mean("fcfs" * 10_000, ["fcfs"]) == ""  # too long to be a typo: not compared
    with pytest.raises(SchedkitError) as excinfo:
        load_workload("nothing-like-it")
    assert str(excinfo.value).startswith("unknown workload 'nothing-like-it'. Known workloads: ")


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("azure-cnv", " (did you mean 'azure-conv'"),
        ("Mooncake-Conv", " (did you mean 'mooncake-conv'?)"),
        ("poison:rate=5,n=10", " (did you mean 'poisson'?)"),
        ("gama:rate=5,cv=4,n=10", " (did you mean 'gamma'?)"),
    ],
)
def test_a_misspelt_workload_gets_the_closest_name(spec: str, hint: str) -> None:
    with pytest.raises(SchedkitError) as excinfo:
        load_workload(spec)
    assert str(excinfo.value).startswith(f"unknown workload '{spec}'{hint}")
    assert "Known workloads: azure-conv, " in str(excinfo.value)
