"""No function over 60 lines in schedkit/ or in an adapter's runtime (STYLE.md; issue #36).

The functions longer than that when the rule came in are listed with their length: each
may only shrink (then lower its entry, or drop it at 60 or less), and no other may grow
past 60. Decorators do not count; test files and the adapters' stand-ins do not either."""

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
# path:function -> its length in lines when the rule came in (issue #36: 25 functions)
ALLOWED = {
    "schedkit/cli/bench.py:bench": 290,
}


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


def test_no_function_grows_past_60_lines() -> None:
    found = long_functions()
    new = {name: n for name, n in found.items() if name not in ALLOWED}
    assert not new, f"functions over {LIMIT} lines; split them: {new}"
    grown = {name: (ALLOWED[name], n) for name, n in found.items() if n > ALLOWED[name]}
    assert not grown, f"listed functions grew (was, now); split them instead: {grown}"
