"""The capability matrix: every hook on every engine, shown in docs/hooks.md as it is in
schedkit/capabilities.py, and warned about at launch."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from _policies import scripted

from schedkit import PolicyFacade, hookspecs
from schedkit.capabilities import ENGINES, MATRIX, differences, render_markdown, warn_unsupported

HOOKS_MD = Path(__file__).resolve().parent.parent / "docs" / "hooks.md"
BLOCK = re.compile(r"<!-- capability-matrix[^>]*-->\n(.*?)\n<!-- /capability-matrix -->", re.S)


def test_docs_show_the_matrix_as_the_code_defines_it() -> None:
    match = BLOCK.search(HOOKS_MD.read_text())
    assert match, "docs/hooks.md has no capability-matrix block"
    assert match.group(1).strip() == render_markdown(), (
        "docs/hooks.md's capability matrix is stale: paste schedkit.capabilities.render_markdown()"
    )


@pytest.mark.parametrize("hook", hookspecs.HOOK_NAMES)
def test_every_hook_has_an_entry_per_engine(hook: str) -> None:
    assert set(MATRIX[hook]) == set(ENGINES)
    for engine, cap in MATRIX[hook].items():
        assert cap.level in ("full", "partial", "none")
        if cap.level != "full":
            assert cap.note, f"{hook} on {engine} is {cap.level} but says nothing of what differs"


def test_simulator_honours_every_hook() -> None:
    assert differences(hookspecs.HOOK_NAMES, "sim") == []


def test_warning_names_hook_engine_and_entry(caplog: pytest.LogCaptureFixture) -> None:
    facade = PolicyFacade([("tpot-cap", scripted(plan_batch=None, admit_request=None))])
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        messages = warn_unsupported(facade, "sglang")
    assert len(messages) == 1
    [message] = messages
    assert "plan_batch" in message and "sglang" in message and "tpot-cap" in message
    assert "decode" in message and "capability matrix" in message
    assert message in caplog.text
    assert warn_unsupported(facade, "vllm") == []
    assert warn_unsupported(facade, "sim") == []


def test_declared_fields_are_warned_where_partly_supported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from schedkit import PolicyRegistry

    policy = PolicyRegistry.discover().load("prefix-aware-queued")()
    facade = PolicyFacade([("prefix-aware-queued", policy)])
    messages = warn_unsupported(facade, "sglang")
    assert any("RequestView.block_hashes" in m and "Rust" in m for m in messages)
    assert any("select_evictions" in m for m in messages)
    assert warn_unsupported(facade, "vllm") == []


def test_every_tier_row_names_every_engine_and_what_differs() -> None:
    from schedkit.capabilities import TIERS

    assert TIERS, "the host KV tier's row is missing"
    for row, caps in TIERS.items():
        assert set(caps) == set(ENGINES), row
        for engine, cap in caps.items():
            assert cap.note, f"{row} on {engine} says nothing of what it means there"
        assert row in render_markdown()
