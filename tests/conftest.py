"""Shared fixtures. Helpers that tests import live in ``_policies.py``."""

from __future__ import annotations

import logging

import pytest

from schedkit import EngineState


@pytest.fixture
def engine() -> EngineState:
    return EngineState(kv_blocks_total=64, block_size=16)


@pytest.fixture
def warnings_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """caplog capturing the facade's warnings."""
    caplog.set_level(logging.WARNING, logger="schedkit")
    return caplog
