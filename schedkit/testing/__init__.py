"""Conformance kit for policy authors: does a policy keep the hook contract?

In a plugin's test file::

    from schedkit.testing import conformance_test

    test_conformance = conformance_test("my-policy", {"max_wait_s": 2.0})

or call ``check_policy`` yourself, directly or through the ``schedkit_conformance``
fixture (this package is a pytest plugin, registered by schedkit's ``pytest11`` entry
point)::

    def test_my_policy(schedkit_conformance):
        schedkit_conformance(MyPolicy, {"max_wait_s": 2.0}, max_examples=50)

``check_policy`` generates random, internally consistent engine states with hypothesis and
calls every hook the policy implements through a strict ``PolicyFacade``, up to
``max_examples`` states per hook. Requests start with one of a few shared prefixes, so
their ``block_hashes`` name some of the eviction candidates' blocks. The policy conforms when, for every state:

- every decision passes the facade's validation (``order_waiting`` returns a permutation,
  victims are running requests, enough distinct eviction candidates, budgets within the
  defaults, rejections carry a reason) and no hook raises;
- no hook mutates its arguments (the lists, requests, engine, blocks or report);
- two fresh instances with the same options decide the same on equal states (compared by
  request id and block hash), so that seeded runs are reproducible;
- its ``Options`` model rejects unknown fields, so a typo in a config is an error.

It then drives a small engine through a few hundred arrivals, steps, preemptions,
evictions and finishes, twice, with two fresh instances, checking the same properties
and that both runs decide alike: this is what exercises policies that keep counters.

A failure raises ``ConformanceError`` (an ``AssertionError``) naming the policy, the
hook and the state, with the seed that reproduces it (``check_policy(..., seed=N)``).
Needs ``hypothesis`` (``pip install 'schedkit[test]'``), imported only when a check runs.

The contract on engines (``schedkit contract``) is here too: ``contract_test("my-policy",
options)`` or the ``schedkit_contract`` fixture (:mod:`schedkit.testing.pytest_plugin`)
run a policy through every contract scenario on the simulator and every engine installed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from schedkit.hookspecs import HOOK_NAMES
from schedkit.policy import Policy
from schedkit.testing._sequence import SEQUENCE_ACTIONS as SEQUENCE_ACTIONS
from schedkit.testing._sequence import _check_sequence
from schedkit.testing._strategies import _check_hook
from schedkit.testing._subject import ConformanceError, _Subject

__all__ = ["ConformanceError", "check_policy", "conformance_test", "contract_test"]


def check_policy(
    policy: str | type[Policy],
    options: Mapping[str, Any] | None = None,
    *,
    max_examples: int = 200,
    seed: int | None = None,
) -> None:
    """Check that ``policy`` (an installed name or a class) keeps the hook contract.

    Raises ``ConformanceError`` on the first violation, ``PolicyConfigError`` when
    ``options`` are invalid for the policy. Without ``seed``, a random one is drawn and
    reported on failure.
    """
    _require_hypothesis()
    subject = _Subject.create(policy, options, random.randrange(2**32) if seed is None else seed)
    hooks = [hook for hook in HOOK_NAMES if hook in subject.facade().implemented]
    for hook in hooks:
        _check_hook(subject, hook, max_examples)
    if hooks:
        _check_sequence(subject)


def conformance_test(
    policy: str | type[Policy],
    options: Mapping[str, Any] | None = None,
    *,
    max_examples: int = 200,
    seed: int | None = None,
) -> Callable[[], None]:
    """A pytest test function running ``check_policy``: ``test_x = conformance_test(...)``."""

    def test_conformance() -> None:
        check_policy(policy, options, max_examples=max_examples, seed=seed)

    name = policy if isinstance(policy, str) else policy.__name__
    test_conformance.__doc__ = f"Policy {name!r} keeps schedkit's hook contract."
    return test_conformance


try:
    import pytest
except ImportError:  # the kit works without pytest; only the fixture needs it
    pass
else:

    @pytest.fixture
    def schedkit_conformance() -> Callable[..., None]:
        """``schedkit.testing.check_policy``, as a fixture."""
        return check_policy

    # the contract on every engine installed here (schedkit.testing.pytest_plugin)
    from schedkit.testing.pytest_plugin import pytest_addoption as pytest_addoption
    from schedkit.testing.pytest_plugin import schedkit_contract as schedkit_contract


def contract_test(
    policy: str, options: Mapping[str, Mapping[str, Any]] | None = None
) -> Callable[..., None]:
    """A pytest test function running ``policy`` (a name, a composition or a config
    file) with ``options`` through the contract on every engine installed here, as
    ``schedkit contract`` does: ``test_contract = contract_test("my-policy", {...})``."""

    def test_contract(schedkit_contract: Callable[..., object]) -> None:
        schedkit_contract(policy, options)

    test_contract.__doc__ = f"{policy!r} keeps the contract on every engine installed here."
    return test_contract


def _require_hypothesis() -> None:
    try:
        import hypothesis  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "schedkit.testing needs hypothesis: pip install 'schedkit[test]'"
            " (or pip install hypothesis)"
        ) from exc
