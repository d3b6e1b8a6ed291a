"""Modules that moved (issue #36): the old name keeps working, with a ``DeprecationWarning``
naming the new one. ``MOVED`` is the one list of them; ``schedkit`` installs the finder that
serves it, so a moved module leaves no file behind at its old place."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["MOVED", "install", "warn_moved"]

# old module -> the module(s) it went to. One: the old name is that very module (patching
# either patches both). Several: a module with the public names of all of them.
MOVED: dict[str, tuple[str, ...]] = {
    # the workload model and trace formats left the simulator
    "schedkit.sim.workloads": ("schedkit.workload",),
    "schedkit.sim.trace_formats": ("schedkit.workload.source", "schedkit.workload.formats.jsonl"),
    "schedkit.sim.azure_csv": (
        "schedkit.workload.formats.azure_csv",
        "schedkit.workload.formats.azure",
    ),
    "schedkit.sim.azure_arrow": ("schedkit.workload.formats.azure_arrow",),
    "schedkit.sim.burstgpt": ("schedkit.workload.formats.burstgpt",),
    "schedkit.sim.text_requests": ("schedkit.workload.formats.prompt_text",),
    "schedkit.sim.synthetic": ("schedkit.workload.synthetic",),
    "schedkit.sim.limits": ("schedkit.workload.limits",),
    # the simulator's KV cache and cost model have packages of their own
    "schedkit.sim.blocks": ("schedkit.sim.kv.blocks",),
    "schedkit.sim.kvcache": ("schedkit.sim.kv.cache",),
    "schedkit.sim.evict_keys": ("schedkit.sim.kv.evict_keys",),
    "schedkit.sim.costmodel": ("schedkit.sim.cost.model",),
    "schedkit.sim.calibration": ("schedkit.sim.cost.calibration",),
    "schedkit.sim.fit": ("schedkit.sim.cost.fit",),
    "schedkit.sim.profiles": ("schedkit.sim.cost.profiles",),
    # the bench: engines, statistics, reports and sweeps
    "schedkit.bench.replay": ("schedkit.bench.engines.requests",),
    "schedkit.bench.engine_requests": ("schedkit.bench.engines.requests",),
    "schedkit.bench.real_arm": ("schedkit.bench.engines.real_arm",),
    "schedkit.bench.live": ("schedkit.bench.engines.live",),
    "schedkit.bench.launch": ("schedkit.bench.engines.launch",),
    "schedkit.bench.interop": ("schedkit.bench.engines.interop",),
    "schedkit.bench.sectioning": ("schedkit.bench.stats.sectioning",),
    "schedkit.bench.metrics": ("schedkit.bench.stats.metrics",),
    "schedkit.bench.compare": ("schedkit.bench.stats.compare",),
    "schedkit.bench.flags": ("schedkit.bench.stats.flags",),
    "schedkit.bench.tables": ("schedkit.bench.report.tables",),
    "schedkit.bench.plots": ("schedkit.bench.report.plots",),
    "schedkit.bench.svg": ("schedkit.bench.report.svg",),
    "schedkit.bench.verdicts": ("schedkit.bench.report.verdicts",),
    "schedkit.bench.vllm_format": ("schedkit.bench.report.vllm_format",),
    "schedkit.bench.sweep_run": ("schedkit.bench.sweep.run",),
    "schedkit.bench.sweep_report": ("schedkit.bench.sweep.report",),
    "schedkit.bench.cli": ("schedkit.cli.bench",),
    "schedkit.bench.plan_cli": ("schedkit.cli.plan",),
    # the HTTP edge is a package
    "schedkit.strict_json": ("schedkit.edge.strict_json",),
    "schedkit.serving": ("schedkit.edge.serving",),
    # one name per concept
    "schedkit.adapter.metadata": ("schedkit.metadata",),
    "schedkit.adapter.replay": ("schedkit.bench.engines.real_arm",),
    # the SGLang and LMDeploy adapters' harness
    "schedkit_sglang.contract": ("schedkit_sglang.harness.contract",),
    "schedkit_sglang.real": ("schedkit_sglang.harness.real",),
    "schedkit_lmdeploy.contract": ("schedkit_lmdeploy.harness.contract",),
    # the vLLM adapter's harness
    "schedkit_vllm.contract": ("schedkit_vllm.harness.contract",),
    "schedkit_vllm.twin": ("schedkit_vllm.harness.twin",),
    "schedkit_vllm.modelless": ("schedkit_vllm.harness.modelless",),
    "schedkit_vllm.real": ("schedkit_vllm.harness.real",),
}


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn, where ``old`` is used, that it moved to ``new``."""
    warnings.warn(
        f"{old} moved to {new}; import it from there ({old} goes in a later release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def _merged(name: str, targets: Sequence[str]) -> types.ModuleType:
    module = types.ModuleType(name, f"Moved to {', '.join(targets)} (issue #36).")
    for target in reversed(targets):  # the first target's names win
        source = importlib.import_module(target)
        public = getattr(source, "__all__", [n for n in vars(source) if not n.startswith("_")])
        for attr in public:
            setattr(module, attr, getattr(source, attr))
    return module


class _MovedLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        targets = MOVED[spec.name]
        # the importer's frame: importlib's own frames stand between it and here
        warnings.warn(
            f"{spec.name} moved to {' and '.join(targets)}; import it from there"
            f" ({spec.name} goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        if len(targets) == 1:
            return importlib.import_module(targets[0])
        return _merged(spec.name, targets)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module is the new one, already imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader())


def install() -> None:
    """Serve the old names (once per process; the files they name are gone)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
