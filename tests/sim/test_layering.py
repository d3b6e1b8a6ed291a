"""The simulator does not depend on the bench: ``schedkit.bench`` imports ``schedkit.sim``,
never the other way round (the records both use live in ``schedkit.records``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import schedkit.sim

SIM = Path(schedkit.sim.__file__).parent
RECORDS = SIM.parent / "records.py"

# Imports every simulator module with schedkit.bench refused, and prints what asked for it.
_PROBE = """
import importlib, importlib.abc, pkgutil, sys

asked = []

class RefuseBench(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "schedkit.bench" or name.startswith("schedkit.bench."):
            asked.append(name)
            raise ImportError("schedkit.sim must not import " + name)
        return None

sys.meta_path.insert(0, RefuseBench())
import schedkit.sim

for module in pkgutil.iter_modules(schedkit.sim.__path__, "schedkit.sim."):
    try:
        importlib.import_module(module.name)
    except ImportError as error:
        if "schedkit.bench" in str(error):
            asked.append(module.name + ": " + str(error))
print("\\n".join(sorted(set(asked))))
"""


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _is_bench(name: str) -> bool:
    return name == "schedkit.bench" or name.startswith("schedkit.bench.")


def test_no_simulator_module_imports_the_bench() -> None:
    offenders = {
        path.name: sorted(filter(_is_bench, _imported(path))) for path in sorted(SIM.glob("*.py"))
    }
    assert {name: bench for name, bench in offenders.items() if bench} == {}
    assert not {name for name in _imported(RECORDS) if name.startswith("schedkit.")}


def test_simulator_imports_with_the_bench_refused() -> None:
    """Indirect imports count too: every ``schedkit.sim`` module loads in a fresh
    interpreter that refuses ``schedkit.bench``."""
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert probe.stdout.strip() == ""
