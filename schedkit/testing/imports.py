"""What an engine's scheduler process loads of schedkit (issue #36): each adapter's suite
checks, in a fresh interpreter, that importing its scheduler class brings in no
simulator, no bench, no workload parsers and no numpy of ours."""

from __future__ import annotations

import json
import subprocess
import sys

__all__ = ["HARNESS_PACKAGES", "loaded_by"]

HARNESS_PACKAGES = ("schedkit.sim", "schedkit.bench", "schedkit.workload", "schedkit.cli")
"""What a scheduler process must not load: the bench's and the simulator's packages."""

_PROBE = """
import importlib, json, sys, time
engine, target = sys.argv[1], sys.argv[2]
importlib.import_module(engine)
before = set(sys.modules)
started = time.perf_counter()
module, _, attr = target.partition(":")
imported = importlib.import_module(module)
if attr:
    getattr(imported, attr)
seconds = time.perf_counter() - started
print(json.dumps({"modules": sorted(set(sys.modules) - before), "seconds": seconds}))
"""


def loaded_by(engine_module: str, target: str, python: str = sys.executable) -> dict[str, object]:
    """The modules that importing ``target`` (``module`` or ``module:attribute``) adds in a
    fresh interpreter once ``engine_module`` (the engine's own scheduler module) is loaded,
    and the seconds it takes: ``{"modules": [...], "seconds": s}``."""
    result = subprocess.run(
        [python, "-c", _PROBE, engine_module, target],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"importing {target} failed:\n{result.stderr[-3000:]}")
    loaded: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded
