"""``benchmarks/`` stays an index a newcomer can follow: every script is listed in the README
of its folder (or of the folder above it), and every link between the benchmark pages
resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
QUESTIONS = (
    "speed",
    "fidelity",
    "policies",
    "stats",
    "engines",
    "report",
    "gpu",
    "disagg",
    "fleet",
)


def scripts() -> list[Path]:
    """Runnable files: not pytest plumbing, not the engine plugins kept in a ``site/``."""
    found = [
        p
        for p in BENCHMARKS.rglob("*")
        if p.suffix in {".py", ".sh"}
        and p.name != "conftest.py"
        and "site" not in p.relative_to(BENCHMARKS).parts
        and "__pycache__" not in p.parts
    ]
    return sorted(found)


def test_every_question_has_a_readme_and_the_index_links_it() -> None:
    index = (BENCHMARKS / "README.md").read_text()
    for folder in QUESTIONS:
        assert (BENCHMARKS / folder / "README.md").is_file(), f"benchmarks/{folder} has no README"
        assert f"]({folder}/README.md)" in index, f"benchmarks/README.md does not link {folder}/"


def test_scripts_live_in_a_question_folder() -> None:
    for script in scripts():
        top = script.relative_to(BENCHMARKS).parts[0]
        assert top in QUESTIONS, f"{script.relative_to(ROOT)} is in no question folder"


@pytest.mark.parametrize("script", scripts(), ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_every_script_is_listed_in_its_folders_readme(script: Path) -> None:
    folder = BENCHMARKS / script.relative_to(BENCHMARKS).parts[0]
    readme = (folder / "README.md").read_text()
    name = script.relative_to(folder).as_posix()
    assert f"`{name}`" in readme, f"{folder.name}/README.md does not list `{name}`"
    assert f"benchmarks/{folder.name}/{name}" in readme, (
        f"{folder.name}/README.md gives no command for {name}"
    )


def test_links_between_benchmark_pages_resolve() -> None:
    broken = []
    for page in BENCHMARKS.rglob("*.md"):
        for match in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            target = match.group(1)
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
