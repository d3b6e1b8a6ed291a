"""A vLLM outside ``SUPPORTED`` (0.35 here): the refusal, and the override that runs it
anyway. ``SUPPORTED`` admits 0.34 since its suites pass (#39 item 1); the next release
is tested with ``make test-vllm-next``, under the override.
"""

from __future__ import annotations

import warnings

import pytest

from schedkit_vllm.compat import (
    OVERRIDE_VAR,
    SUPPORTED,
    UnsupportedVllmError,
    UnsupportedVllmWarning,
    check_version,
)


def test_the_refusal_names_installed_supported_and_the_override() -> None:
    with pytest.raises(UnsupportedVllmError) as refused:
        check_version("0.35.0", environ={})
    message = str(refused.value)
    assert "vLLM 0.35.0 is installed" in message
    assert f"supports vLLM {SUPPORTED}" in message
    assert "pip install vllm==0.33.0" in message
    assert message.endswith(f"To run it anyway, untested: {OVERRIDE_VAR}=0.35.0")


def test_the_override_admits_only_the_version_it_names() -> None:
    with pytest.raises(UnsupportedVllmError, match=rf"{OVERRIDE_VAR}=0\.35\.1 names another"):
        check_version("0.35.0", environ={OVERRIDE_VAR: "0.35.1"})
    with pytest.raises(UnsupportedVllmError, match="cannot read the installed vLLM version"):
        check_version("", environ={OVERRIDE_VAR: ""})


def test_an_admitted_unsupported_version_is_loud(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.warns(UnsupportedVllmWarning, match=r"vLLM 0\.35\.0, outside the supported"):
        check_version("0.35.0", environ={OVERRIDE_VAR: "0.35.0"})
    assert any(OVERRIDE_VAR in r.getMessage() for r in caplog.records)


def test_a_supported_version_needs_no_override() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_version("0.33.0", environ={OVERRIDE_VAR: "0.35.0"})
