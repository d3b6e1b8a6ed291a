"""The contract in a policy author's own test suite: the ``schedkit_contract`` fixture.

Installed with schedkit (entry point ``pytest11``), so a policy package's tests need no
set-up::

    def test_my_policy_keeps_the_contract(schedkit_contract):
        schedkit_contract("ratio-demo+keep-priority", {"ratio-demo": {"max_prompt_tokens": 300}})

runs the policy (a name, a composition ``a+b`` or a config file, with options per policy)
through every contract scenario on the simulator and on every engine whose adapter is
installed in the test environment, as ``schedkit contract`` does, and fails listing every
difference the capability matrix does not allow; it returns the rows (scenario, engine,
kept, what a partial rule left uncompared). An engine registered but not loadable fails
the test: a suite that cannot run says so. Options: ``--schedkit-model PATH`` (engines
that run a model: the real vLLM CPU engine; SGLang's tiny model otherwise),
``--schedkit-engine NAME`` (repeatable; the simulator always runs).

This module imports only pytest at load: the contract's modules load when the fixture
is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from schedkit.testing.contract_run import Row

__all__ = ["ContractCheck", "schedkit_contract"]


class ContractCheck(Protocol):
    """What the fixture gives: call it with a policy and its options."""

    def __call__(
        self,
        policy: str | Path,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        scenarios: Sequence[str] | None = None,
    ) -> list[Row]: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("schedkit", "schedkit's policy contract")
    group.addoption(
        "--schedkit-model",
        default=None,
        help="a local model directory for the contract engines that run one",
    )
    group.addoption(
        "--schedkit-engine",
        action="append",
        default=None,
        help="run the contract on this engine only (repeat; the simulator always runs)",
    )


@pytest.fixture
def schedkit_contract(pytestconfig: pytest.Config) -> ContractCheck:
    """Runs a policy through the contract on every engine installed here (module doc)."""
    model = pytestconfig.getoption("schedkit_model")
    only: list[str] | None = pytestconfig.getoption("schedkit_engine")

    def check(
        policy: str | Path,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        scenarios: Sequence[str] | None = None,
    ) -> list[Row]:
        from schedkit.config import load_config
        from schedkit.testing.contract import SCENARIOS
        from schedkit.testing.contract_run import assert_contract, installed_engines

        config = load_config(policy)
        if options:
            merged = {**config.options, **{k: dict(v) for k, v in options.items()}}
            config = config.model_copy(update={"options": merged})
            config = load_config(config.model_dump())  # validated again, with the options
        engines, problems = installed_engines(None if model is None else Path(model))
        assert not problems, f"contract engines installed here that cannot load: {problems}"
        if only:
            missing = set(only) - {e.name for e in engines}
            assert not missing, f"--schedkit-engine {sorted(missing)} is not installed here"
            engines = [e for e in engines if e.name == "sim" or e.name in only]
        chosen = [s for s in SCENARIOS if scenarios is None or s.name in scenarios]
        assert chosen, f"no contract scenario among {scenarios}"
        return assert_contract(config, engines, chosen)

    return check
