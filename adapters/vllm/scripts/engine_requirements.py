"""Print an installed distribution's requirements, with some pins replaced.

    python engine_requirements.py DIST [REQUIREMENT ...]

Each REQUIREMENT replaces the requirement of the same name that DIST declares (extras
left out; environment markers kept, for pip to evaluate). make-venv.sh uses it when a
release pins a version the package index lacks. A REQUIREMENT that DIST does not declare
is an error, so that an override outliving its reason shows.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _key(requirement: str) -> str:
    match = _NAME.match(requirement)
    if match is None:
        raise SystemExit(f"engine_requirements: cannot read a name in {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def main(dist: str, overrides: list[str]) -> int:
    replace = {_key(o): o for o in overrides}
    used: set[str] = set()
    for requirement in importlib.metadata.requires(dist) or []:
        if re.search(r"\bextra\s*==", requirement):
            continue
        key = _key(requirement)
        if key in replace:
            print(f"# {dist} declares: {requirement}", flush=True)
            requirement = replace[key]
            used.add(key)
        print(requirement)
    unused = sorted(set(replace) - used)
    if unused:
        print(f"engine_requirements: {dist} declares no {', '.join(unused)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
