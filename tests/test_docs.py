"""docs/hooks.md documents every hook with its exact signature, every hook has a test of
its own, and every example on the page runs (datasette's test_docs, adapted)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from _policies import make_blocks, make_requests

from schedkit import (
    BatchBudget,
    BlockView,
    EngineState,
    EngineView,
    Policy,
    PolicyFacade,
    ReplicaView,
    RequestView,
    StepReport,
    hookspecs,
)

ROOT = Path(__file__).resolve().parent.parent
HOOKS_MD = ROOT / "docs" / "hooks.md"
TEST_HOOKS = Path(__file__).resolve().parent / "test_hooks.py"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def sections() -> dict[str, str]:
    """Level-2 sections of docs/hooks.md by title, in page order."""
    parts = re.split(r"^## +(.+?) *$", HOOKS_MD.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def code_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def spec_signature(hook: str) -> str:
    """``def hook(arg: Type, ...) -> Result`` as written in hookspecs.py (annotations are
    strings there, thanks to ``from __future__ import annotations``)."""
    sig = inspect.signature(getattr(hookspecs, hook))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {hook}({params}) -> {sig.return_annotation}"


def hook_test_names() -> list[str]:
    tree = ast.parse(TEST_HOOKS.read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_hook_")
    ]


def examples() -> list[tuple[str, int, str]]:
    """(section, index, code) of every Python block that is not a hook's signature."""
    found = []
    for title, text in sections().items():
        blocks = [code for lang, code in code_blocks(text) if lang == "python"]
        if title in hookspecs.HOOK_NAMES:
            blocks = blocks[1:]  # the first is the signature
        found += [(title, i, code) for i, code in enumerate(blocks)]
    return found


def policy_classes(namespace: dict[str, object]) -> list[type[Policy]]:
    return [
        obj
        for obj in namespace.values()
        if isinstance(obj, type) and issubclass(obj, Policy) and obj is not Policy
    ]


def test_spec_signature_is_built_from_hookspecs() -> None:
    assert spec_signature("plan_batch") == (
        "def plan_batch(engine: EngineView, default: BatchBudget) -> BatchBudget | None"
    )


def test_hooks_are_documented_in_hookspec_order() -> None:
    documented = [title for title in sections() if title in hookspecs.HOOK_NAMES]
    assert documented == list(hookspecs.HOOK_NAMES)


@pytest.mark.parametrize("hook", hookspecs.HOOK_NAMES)
def test_hook_is_documented_with_its_signature(hook: str) -> None:
    all_sections = sections()
    assert hook in all_sections, f"docs/hooks.md has no '## {hook}' section"
    blocks = code_blocks(all_sections[hook])
    assert blocks, f"'## {hook}' has no code block with the signature"
    lang, signature = blocks[0]
    assert lang == "python"
    assert signature.strip() == spec_signature(hook), (
        f"signature of {hook} in docs/hooks.md differs from schedkit/hookspecs.py"
    )


@pytest.mark.parametrize("hook", hookspecs.HOOK_NAMES)
def test_hook_has_a_test_of_its_own(hook: str) -> None:
    names = hook_test_names()
    assert any(name.startswith(f"test_hook_{hook}") for name in names), (
        f"tests/test_hooks.py has no test named test_hook_{hook}_..."
    )


@pytest.mark.parametrize("hook", hookspecs.HOOK_NAMES)
def test_hook_section_has_an_example(hook: str) -> None:
    assert any(section == hook for section, _, _ in examples()), (
        f"'## {hook}' has no example policy"
    )


@pytest.mark.parametrize(
    "view", [RequestView, EngineView, BlockView, ReplicaView], ids=lambda v: v.__name__
)
def test_every_view_field_is_documented(view: type) -> None:
    text = HOOKS_MD.read_text().split("### What policies see", 1)[1].split("\n### ", 1)[0]
    fields = [name for name, value in vars(view).items() if isinstance(value, property)]
    assert fields
    missing = [name for name in fields if f"`{name}`" not in text]
    assert not missing, f"docs/hooks.md, 'What policies see', does not describe {missing}"


@pytest.mark.parametrize(
    ("section", "index", "code"),
    examples(),
    ids=[f"{section}-{index}" for section, index, _ in examples()],
)
def test_example_runs_and_registers(section: str, index: int, code: str) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_example_{index}"}
    exec(compile(code, f"docs/hooks.md [{section} #{index}]", "exec"), namespace)
    classes = policy_classes(namespace)
    if section not in hookspecs.HOOK_NAMES:
        return
    assert len(classes) == 1, f"the {section} example should define one policy class"
    facade = PolicyFacade([(section, classes[0]())], strict=True)
    assert facade.implemented == {section}
    drive(facade)  # strict: an invalid answer raises


def drive(facade: PolicyFacade) -> None:
    """Call every hook once with small, valid arguments."""
    engine = EngineState(kv_blocks_total=64, block_size=16)
    requests = make_requests(4)
    requests[1].tenant = "b"
    blocks = make_blocks(6)
    facade.admit(requests[0], engine)
    facade.order_waiting(requests, engine)
    facade.plan_batch(engine, BatchBudget(token_budget=2048, max_running=8, prefill_chunk=512))
    facade.select_victims(requests, requests[0], engine)
    facade.select_evictions(blocks, 2, engine)
    facade.waiting_key(requests[0], engine)
    facade.victim_key(requests[0], engine)
    facade.eviction_key(blocks[0], engine)
    report = StepReport(1, 0.01, 0, 4, scheduled=requests, num_scheduled_tokens=[1] * 4)
    facade.step_finished(report, engine)
    facade.request_finished(requests[0], "stop", engine)
