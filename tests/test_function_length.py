"""No function over 60 lines in schedkit/ or in an adapter's package (STYLE.md; issue #36;
``make lint`` runs this). Decorators do not count; test files and the adapters'
stand-ins do not either. When the rule came in, 25 functions were longer (the longest,
``schedkit bench``'s, 315 lines); none is now."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = [
    "schedkit",
    "adapters/vllm/schedkit_vllm",
    "adapters/sglang/schedkit_sglang",
    "adapters/lmdeploy/schedkit_lmdeploy",
]
LIMIT = 60


def long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "_cpu_site" in path.parts:
                continue
            where = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LIMIT:
                        found[f"{where}:{node.name}"] = max(lines, found.get(where, 0))
    return found


def test_no_function_is_over_60_lines() -> None:
    found = long_functions()
    assert not found, f"functions over {LIMIT} lines; split them: {found}"
