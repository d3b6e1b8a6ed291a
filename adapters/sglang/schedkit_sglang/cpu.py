"""Running SGLang on a CPU-only machine: stand-ins for its CUDA-only imports.

SGLang imports ``sgl_kernel`` (CUDA kernels) at module level even where the CPU engine
never calls it, and a lean CPU install has no ``torchvision``. SGLang's own CPU tests
stub them (``sglang.test.test_utils.maybe_stub_sgl_kernel``); ``install()`` does the
same, only for modules that cannot be imported. Scheduler processes are spawned, so
``schedkit serve sglang`` and the bench put ``SITE_DIR`` (a ``sitecustomize`` calling
``install()``) on ``PYTHONPATH`` when SGLang runs on CPU (``SGLANG_USE_CPU_ENGINE=1``).
On a GPU machine with the real packages this is never needed and does nothing.

``install()`` also makes SGLang's Mooncake KV sender (prefill/decode disaggregation,
``--disaggregation-transfer-backend mooncake_tcp``) pass page indices as it does without
host tensors: with them it pins memory and waits on a ``torch.cuda.Event``
(``disaggregation/prefill.py``), which kills a CPU prefill server's first request.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SITE_DIR = Path(__file__).with_name("_cpu_site")
"""A directory whose ``sitecustomize.py`` calls ``install()`` in every new interpreter."""

STUBBED = ("sgl_kernel", "torchvision")
MOONCAKE = "sglang.srt.disaggregation.mooncake.conn"
"""Where ``MooncakeKVSender`` is: its ``supports_host_tensor_indices`` is CUDA-only."""

ENGINE_ARGS: dict[str, object] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "sampling_backend": "pytorch",
    "disable_cuda_graph": True,
    "disable_overlap_schedule": True,
    "dtype": "bfloat16",
}
"""``sglang.Engine`` arguments that run SGLang on CPU (``--device cpu ...`` on the CLI)."""


def pythonpath(current: str) -> str:
    """``current`` (a ``PYTHONPATH`` value) with ``SITE_DIR`` first, once."""
    site = str(SITE_DIR)
    return os.pathsep.join([site, *(p for p in current.split(os.pathsep) if p and p != site)])


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        from unittest.mock import MagicMock

        def attribute(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return MagicMock(name=f"{module.__name__}.{name}")

        module.__getattr__ = attribute  # type: ignore[method-assign]
        # transformers parses the version of every importable package; "0" reads as
        # too old for its torchvision fast paths, so it keeps to PIL.
        module.__version__ = "0"  # type: ignore[attr-defined]


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


class _HostIndicesOff(importlib.abc.MetaPathFinder):
    """Finds ``MOONCAKE`` as usual, and sets ``MooncakeKVSender.supports_host_tensor_indices``
    False once it has run."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MOONCAKE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            sender = getattr(module, "MooncakeKVSender", None)
            if sender is not None:
                sender.supports_host_tensor_indices = False

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> tuple[str, ...]:
    """Stub whichever of ``STUBBED`` cannot be imported; return the names stubbed."""
    if any(isinstance(finder, _StubFinder | _HostIndicesOff) for finder in sys.meta_path):
        return ()
    sys.meta_path.insert(0, _HostIndicesOff())
    roots = tuple(name for name in STUBBED if _missing(name))
    if roots:
        sys.meta_path.insert(0, _StubFinder(roots))
    return roots
