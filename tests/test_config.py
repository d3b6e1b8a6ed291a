"""load_config and PolicyFacade.from_config: every source, every error named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schedkit import PolicyFacade, SchedkitConfig, load_config
from schedkit.errors import PolicyConfigError
from schedkit.plugins import PolicyEntry, PolicyRegistry
from schedkit.trust import TrustConfig

SLO_VTC = SchedkitConfig(policy=["slo", "vtc"], options={"vtc": {"weight": 2}})


# -- sources ----------------------------------------------------------------------------


def test_none_is_fcfs() -> None:
    assert load_config(None) == SchedkitConfig(policy=["fcfs"], options={})


def test_from_dict() -> None:
    assert load_config({"policy": ["slo", "vtc"], "options": {"vtc": {"weight": 2}}}) == SLO_VTC


def test_config_object_is_returned_as_is() -> None:
    assert load_config(SLO_VTC) is SLO_VTC


def test_from_json_string() -> None:
    text = '  {"policy": ["slo", "vtc"], "options": {"vtc": {"weight": 2}}}'
    assert load_config(text) == SLO_VTC


def test_schedkit_wrapper_is_unwrapped() -> None:
    assert (
        load_config({"schedkit": {"policy": "slo+vtc", "options": {"vtc": {"weight": 2}}}})
        == SLO_VTC
    )
    assert load_config('{"schedkit": {"policy": "priority"}}').policy == ["priority"]


def test_from_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.toml"
    path.write_text('policy = ["slo", "vtc"]\n\n[options.vtc]\nweight = 2\n')
    assert load_config(path) == SLO_VTC
    assert load_config(str(path)) == SLO_VTC


def test_from_wrapped_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.toml"
    path.write_text('[schedkit]\npolicy = "slo+vtc"\n\n[schedkit.options.vtc]\nweight = 2\n')
    assert load_config(path) == SLO_VTC


def test_from_json_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.json"
    path.write_text(json.dumps({"policy": ["slo", "vtc"], "options": {"vtc": {"weight": 2}}}))
    assert load_config(path) == SLO_VTC
    assert load_config(str(path)) == SLO_VTC


def test_bare_policy_name() -> None:
    assert load_config("priority") == SchedkitConfig(policy=["priority"])


def test_plus_composition_keeps_order_and_strips_spaces() -> None:
    assert load_config("slo+vtc").policy == ["slo", "vtc"]
    assert load_config(" vtc + slo ").policy == ["vtc", "slo"]
    assert load_config({"policy": "vtc+slo"}).label == "vtc+slo"


def test_config_is_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        SLO_VTC.policy = ["fcfs"]


# -- errors -----------------------------------------------------------------------------


# Words of the validation library a message must not carry.
LIBRARY_WORDING = (
    "Input should", "Value error", "Extra inputs are not permitted", "For further information",
    "pydantic", "(top level)",
)  # fmt: skip
KEYS = "policy, options, trust, record_steps, hook_budget_ms, hook_budget_hard"
TRUST_FIELDS = ", ".join(TrustConfig.model_fields)


def refusal(source: object) -> str:
    """What load_config says of ``source``, which it refuses; never the library's words."""
    with pytest.raises(PolicyConfigError) as excinfo:
        load_config(source)  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert not [words for words in LIBRARY_WORDING if words in message], message
    return message


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            {"policy": "fcfs", "polcy_options": {}},
            f"unknown key 'polcy_options'; valid keys: {KEYS} (did you mean 'options'?)",
        ),
        ({"polcy": "fcfs"}, f"unknown key 'polcy'; valid keys: {KEYS} (did you mean 'policy'?)"),
        ({"zzz": 1}, f"unknown key 'zzz'; valid keys: {KEYS}"),
        (
            {"policy": "fcfs", "options": {"vtc": {}}},
            "options given for 'vtc', which is not selected; selected: ['fcfs']",
        ),
        ("slo+slo", "policy 'slo' is selected twice; name each policy once"),
        ({"policy": ["a", "b", "a"]}, "policy 'a' is selected twice; name each policy once"),
        ("slo+", "policy names must be non-empty, e.g. 'fcfs' or 'slo+vtc'"),
        ({"policy": [""]}, "policy names must be non-empty, e.g. 'fcfs' or 'slo+vtc'"),
        ({"policy": []}, "policy: [] is not accepted; it takes a list of strings with at least 1 item"),
        (
            {"policy": 3},
            "policy: 3 is not accepted; it takes a policy name, names joined by '+' such as"
            " 'slo+vtc', or a list of names",
        ),
        ({"policy": ["fcfs", 3]}, "policy.1: 3 is not accepted; it takes a string"),
        ({"options": {"fcfs": 1}}, "options.fcfs: 1 is not accepted; it takes an object"),
        (
            {"options": "sjf"},
            "options: 'sjf' is not accepted; it takes an object mapping names to an object",
        ),
        (
            {"hook_budget_ms": 0},
            "hook_budget_ms: 0 is not accepted; it takes a number greater than 0 and at most 60000",
        ),
        ({"hook_budget_hard": "yes"}, "hook_budget_hard: 'yes' is not accepted; it takes true or false"),
        (
            {"record_steps": ""},
            "record_steps: '' is not accepted; it takes a string with 1 to 4096 characters",
        ),
        (
            {"trust": {"tenant_hedaer": "x"}},
            f"unknown field 'trust.tenant_hedaer'; valid fields of trust: {TRUST_FIELDS}"
            " (did you mean 'tenant_header'?)",
        ),
        (
            {"trust": {"trace": "bodi"}},
            "trust.trace: 'bodi' is not accepted; it takes 'trusted' or 'body' (did you mean 'body'?)",
        ),
        (
            {"trust": {"max_body_depth": 1000}},
            "trust.max_body_depth: 1000 is not accepted; it takes an integer from 4 to 512",
        ),
        (
            {"policy": 3, "hook_budget_ms": -1},
            "policy: 3 is not accepted; it takes a policy name, names joined by '+' such as"
            " 'slo+vtc', or a list of names; hook_budget_ms: -1 is not accepted; it takes a"
            " number greater than 0 and at most 60000",
        ),
    ],
    ids=[
        "unknown-key", "unknown-key-policy", "unknown-key-far", "options-unselected",
        "duplicate-plus", "duplicate-list", "empty-name", "empty-string", "no-policy",
        "policy-not-list", "policy-not-string", "options-not-dict", "options-not-mapping",
        "budget-bound", "hard-not-bool", "record-steps-empty", "trust-unknown-field",
        "trust-choice", "trust-bound", "two-problems",
    ],
)  # fmt: skip
def test_invalid_config_names_the_key_the_value_and_what_it_takes(
    source: object, problem: str
) -> None:
    assert refusal(source) == f"invalid schedkit config: {problem}"


def test_invalid_json_is_named() -> None:
    assert refusal('{"policy": "slo",}').startswith("config is not valid JSON: ")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(PolicyConfigError, match=r"cannot read config file .*nope\.toml"):
        load_config(str(missing))


def test_bad_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("policy = [\n")
    with pytest.raises(PolicyConfigError, match=r"bad\.toml is not valid toml"):
        load_config(path)


def test_bad_json_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{policy: fcfs}")
    with pytest.raises(PolicyConfigError, match=r"bad\.json is not valid json"):
        load_config(path)


def test_invalid_file_content_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.toml"
    path.write_text('policy = "fcfs"\nunknown = 1\n')
    assert refusal(path) == (
        f"invalid schedkit config file {path}: unknown key 'unknown'; valid keys: {KEYS}"
    )


# -- options of a policy ----------------------------------------------------------------


@pytest.fixture
def registry() -> PolicyRegistry:
    return PolicyRegistry(
        [
            PolicyEntry("bounded", "schedkit-tests", "0", "_policies:Bounded"),
            PolicyEntry("fcfs", "schedkit", "0", "schedkit.policies.builtin:FCFS"),
        ]
    )


def test_options_reach_the_policy(registry: PolicyRegistry) -> None:
    facade = PolicyFacade.from_config(
        {"policy": "fcfs+bounded", "options": {"bounded": {"max_waiting": 12}}}, registry=registry
    )
    assert facade.label == "fcfs+bounded"
    [(_, _), (name, policy)] = facade.policies
    assert name == "bounded"
    assert policy.options.max_waiting == 12  # type: ignore[attr-defined]
    assert policy.options.label == "x"  # type: ignore[attr-defined]


def test_policy_without_options_gets_defaults(registry: PolicyRegistry) -> None:
    [(_, policy)] = PolicyFacade.from_config("bounded", registry=registry).policies
    assert policy.options.max_waiting == 8  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_waiting": 0}, " option max_waiting: 0 is not accepted; it takes an integer from 1"),
        ({"max_waiting": 5000}, " option max_waiting: 5000 is not accepted; it takes an integer"),
        ({"max_waiting": "many"}, " option max_waiting: 'many' is not accepted; it takes an int"),
        ({"max_wait": 3}, ": unknown option 'max_wait'; valid options: max_waiting, label"),
    ],
    ids=["below", "above", "type", "unknown-field"],
)
def test_bad_options_name_the_policy_and_field(
    registry: PolicyRegistry, options: dict[str, object], problem: str
) -> None:
    config = {"policy": ["fcfs", "bounded"], "options": {"bounded": options}}
    with pytest.raises(PolicyConfigError, match=re.escape(f"policy 'bounded'{problem}")):
        PolicyFacade.from_config(config, registry=registry)


def test_from_config_rejects_a_bad_config_before_loading_anything() -> None:
    unloadable = PolicyRegistry([PolicyEntry("ghost", "schedkit-tests", "0", "no_such_module:X")])
    # Loading "ghost" would raise PluginLoadError; the config is checked first.
    with pytest.raises(PolicyConfigError, match="selected twice"):
        PolicyFacade.from_config("ghost+ghost", registry=unloadable)
