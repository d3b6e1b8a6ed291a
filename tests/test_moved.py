"""Modules that moved in issue #36 keep working at their old names, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "schedkit.sim.workloads": ("schedkit.workload", ["TraceRequest", "Workload", "load_workload"]),
    "schedkit.sim.trace_formats": ("schedkit.workload.source", ["TraceSource", "parse_jsonl"]),
    "schedkit.sim.azure_csv": ("schedkit.workload.formats.azure_csv", ["parse_azure_csv"]),
    "schedkit.sim.azure_arrow": ("schedkit.workload.formats.azure_arrow", []),
    "schedkit.sim.burstgpt": ("schedkit.workload.formats.burstgpt", []),
    "schedkit.sim.text_requests": ("schedkit.workload.formats.prompt_text", []),
    "schedkit.sim.synthetic": ("schedkit.workload.synthetic", ["spec_workload"]),
    "schedkit.sim.limits": ("schedkit.workload.limits", ["MAX_TOKENS"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_warns_and_gives_the_same_objects(old: str) -> None:
    new, names = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    for name in names:
        assert getattr(module, name) is not None
    if not names:  # moved whole: the very module
        assert module is importlib.import_module(new)
    sys.modules.pop(old, None)
