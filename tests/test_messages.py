"""Messages for a misspelt or refused name or value (#38 item 10): each names the option,
the value given and what is accepted, suggests a close match, and carries none of the
validation library's wording."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedkit import PolicyFacade
from schedkit.errors import PolicyConfigError, SchedkitError, UnknownPolicyError, did_you_mean
from schedkit.plugins import PolicyEntry, PolicyRegistry
from schedkit.testing import check_policy
from schedkit.workload import load_workload

# A policy with an option of every kind an error can be about.
KNOBS = """
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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

        @model_validator(mode="after")
        def _fair_needs_tenants(self) -> "Plugin.Options":
            if self.mode == "fair" and not self.tenants:
                raise ValueError("mode 'fair' needs tenants to be fair between")
            return self
"""
OPTIONS = "soft_cap_tokens, mode, budget_ms, tenants, weights"
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
        f"policy 'knobs' has no option 'soft_cap'; its options: {OPTIONS}"
        " (did you mean 'soft_cap_tokens'?)"
    )
    assert refusal(registry, {"zzz": 3}) == (
        f"policy 'knobs' has no option 'zzz'; its options: {OPTIONS}"
    )
    assert refusal(registry, {"x": 1}, policy="fcfs") == (
        "policy 'fcfs' has no option 'x'; it takes no options"
    )


def test_an_unknown_field_inside_an_option_lists_its_fields(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"tenants": {"gold": {"ttft": 500}}}) == (
        "policy 'knobs' option tenants.gold has no field 'ttft'; its fields: ttft_ms"
        " (did you mean 'ttft_ms'?)"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"soft_cap_tokens": 0}, "soft_cap_tokens: 0 is not accepted; it takes an integer >= 1 and <= 1000"),
        ({"soft_cap_tokens": "many"}, "soft_cap_tokens: 'many' is not accepted; it takes an integer >= 1 and <= 1000"),
        ({"mode": "slow"}, "mode: 'slow' is not accepted; it takes 'fast' or 'fair'"),
        ({"budget_ms": -1}, "budget_ms: -1 is not accepted; it takes a number > 0 and <= 60000, or null"),
        ({"weights": {"a": 0}}, "weights.a: 0 is not accepted; it takes a number > 0"),
        ({"tenants": 3}, "tenants: 3 is not accepted; it takes an object mapping names to an object with the fields ttft_ms"),
        ({"tenants": {"gold": {"ttft_ms": "soon"}}}, "tenants.gold.ttft_ms: 'soon' is not accepted; it takes a number > 0, or null"),
    ],
    ids=["bound", "type", "choice", "optional", "mapping", "object", "nested"],
)  # fmt: skip
def test_a_bad_value_names_the_option_the_value_and_what_is_accepted(
    registry: PolicyRegistry, options: dict[str, object], message: str
) -> None:
    assert refusal(registry, options) == f"policy 'knobs' option {message}"


def test_a_validator_speaks_in_its_own_words(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"mode": "fair"}) == (
        "policy 'knobs' options: mode 'fair' needs tenants to be fair between"
    )


def test_every_problem_is_named_once(registry: PolicyRegistry) -> None:
    assert refusal(registry, {"mode": "slow", "soft_cap": 1}) == (
        "policy 'knobs' option mode: 'slow' is not accepted; it takes 'fast' or 'fair';"
        f" policy 'knobs' has no option 'soft_cap'; its options: {OPTIONS}"
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
    assert str(excinfo.value).startswith("policy 'Plugin' has no option 'soft_cap'; its options: ")
    assert "(did you mean 'soft_cap_tokens'?)" in str(excinfo.value)


def test_the_command_shows_the_message_alone(site: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    for options, message in [
        ('{"knobs": {"soft_cap": 3}}', f"has no option 'soft_cap'; its options: {OPTIONS} (did"),
        ('{"knobs": {"mode": 3}}', "option mode: 3 is not accepted; it takes 'fast' or 'fair'"),
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
        assert text.startswith(f"error: policy 'knobs' {message}"), proc.stderr
        assert not [words for words in LIBRARY_WORDING if words in text], proc.stderr
        assert "Traceback" not in proc.stderr


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
