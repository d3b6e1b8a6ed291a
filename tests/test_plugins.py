"""Plugin discovery through real entry points: fake distributions installed on disk in
tmp_path, found by importlib.metadata. No mocks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedkit import PolicyFacade
from schedkit.errors import DuplicatePolicyError, PluginLoadError, UnknownPolicyError
from schedkit.plugins import PolicyRegistry, implemented_hooks

FOO_MODULE = """
from pathlib import Path

from schedkit import Policy, hookimpl

# Record every import of this module, to prove it happens once and only on load.
with open(Path(__file__).with_name("imports.log"), "a") as log:
    log.write("imported\\n")


class FooPolicy(Policy):
    @hookimpl
    def order_waiting(self, waiting, engine):
        return None
"""

OTHER_MODULE = """
from schedkit import Policy


class {name}(Policy):
    pass
"""


def install(
    site: Path,
    distribution: str,
    version: str,
    entry_points: dict[str, str],
    modules: dict[str, str] | None = None,
) -> None:
    """Write ``<distribution>-<version>.dist-info`` and module files into ``site``."""
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[schedkit.policies]\n{lines}")
    for module, source in (modules or {}).items():
        package = site / module
        package.mkdir()
        (package / "__init__.py").write_text(source)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path; modules imported from it are forgotten afterwards."""
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in set(sys.modules) - before:
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if module_file.startswith(str(tmp_path)):
            del sys.modules[name]


@pytest.fixture
def foo(site: Path) -> Path:
    install(site, "schedkit-foo", "1.2", {"foo": "foo_pkg:FooPolicy"}, {"foo_pkg": FOO_MODULE})
    return site


def imports_of(site: Path) -> int:
    log = site / "foo_pkg" / "imports.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_discovery_lists_builtins_and_installed_plugins(foo: Path) -> None:
    registry = PolicyRegistry.discover()

    assert {"fcfs", "priority", "foo"} <= set(registry.names())
    assert registry.names() == sorted(registry.names())
    entry = registry.entry("foo")
    assert (entry.distribution, entry.version, entry.target) == (
        "schedkit-foo",
        "1.2",
        "foo_pkg:FooPolicy",
    )
    assert registry.entry("fcfs").distribution == "schedkit"
    assert registry.entry("priority").distribution == "schedkit"
    assert "foo" in [e.name for e in registry.entries()]


def test_discovery_imports_nothing_and_load_imports_once(foo: Path) -> None:
    registry = PolicyRegistry.discover()
    assert "foo_pkg" not in sys.modules
    assert imports_of(foo) == 0

    cls = registry.load("foo")

    assert "foo_pkg" in sys.modules
    assert cls is sys.modules["foo_pkg"].FooPolicy
    assert registry.load("foo") is cls
    assert PolicyRegistry.discover().load("foo") is cls
    assert imports_of(foo) == 1
    assert implemented_hooks(cls) == ["order_waiting"]


def test_selected_plugin_is_active(foo: Path) -> None:
    facade = PolicyFacade.from_config("foo+priority")
    assert facade.label == "foo+priority"
    assert type(facade.policies[0][1]).__name__ == "FooPolicy"
    assert facade.has_order and facade.has_victims


def test_installed_but_not_selected_is_not_active(foo: Path) -> None:
    facade = PolicyFacade.from_config(None)
    assert facade.label == "fcfs"
    assert facade.implemented == frozenset()
    assert "foo_pkg" not in sys.modules


def test_same_name_from_two_distributions(site: Path) -> None:
    install(site, "schedkit-foo", "1.2", {"foo": "foo_pkg:FooPolicy"}, {"foo_pkg": FOO_MODULE})
    install(
        site,
        "schedkit-foo-fork",
        "0.3",
        {"foo": "fork_pkg:Foo", "bar": "fork_pkg:Bar"},
        {"fork_pkg": OTHER_MODULE.format(name="Foo") + OTHER_MODULE.format(name="Bar")},
    )
    registry = PolicyRegistry.discover()

    with pytest.raises(DuplicatePolicyError, match="'foo'") as excinfo:
        registry.load("foo")
    named = str(excinfo.value).split("distributions: ")[1].split(".")[0].split(", ")
    assert sorted(named) == ["schedkit-foo", "schedkit-foo-fork"]
    with pytest.raises(DuplicatePolicyError):
        PolicyFacade.from_config("fcfs+foo")
    assert "foo_pkg" not in sys.modules

    # The name is unusable, the distributions' other policies are not.
    assert registry.load("bar").__name__ == "Bar"
    assert PolicyFacade.from_config("bar+priority").label == "bar+priority"


def test_plugin_whose_import_fails(foo: Path) -> None:
    install(
        foo,
        "schedkit-broken",
        "0.1",
        {"broken": "broken_pkg:Broken"},
        {"broken_pkg": "import schedkit_no_such_dependency\n"},
    )
    registry = PolicyRegistry.discover()

    with pytest.raises(PluginLoadError, match="schedkit-broken") as excinfo:
        registry.load("broken")
    assert "ModuleNotFoundError" in str(excinfo.value)
    with pytest.raises(PluginLoadError, match="'broken'"):
        PolicyFacade.from_config("broken")

    assert registry.load("foo").__name__ == "FooPolicy"
    assert PolicyFacade.from_config("foo").label == "foo"


@pytest.mark.parametrize(
    ("target", "source"),
    [
        ("notpol_pkg:make_policy", "def make_policy():\n    return None\n"),
        ("notpol_pkg:Plain", "class Plain:\n    pass\n"),
        ("notpol_pkg:INSTANCE", "from schedkit import Policy\nINSTANCE = Policy()\n"),
        ("notpol_pkg:Missing", "X = 1\n"),
        ("notpol_pkg", "X = 1\n"),
    ],
    ids=["function", "plain-class", "instance", "missing-attribute", "module"],
)
def test_entry_point_that_is_not_a_policy_class(site: Path, target: str, source: str) -> None:
    install(site, "schedkit-notpol", "1.0", {"notpol": target}, {"notpol_pkg": source})
    registry = PolicyRegistry.discover()
    with pytest.raises(
        PluginLoadError, match=r"policy 'notpol' from distribution 'schedkit-notpol'"
    ):
        registry.load("notpol")


def test_unknown_policy_lists_installed_names(foo: Path) -> None:
    with pytest.raises(UnknownPolicyError) as excinfo:
        PolicyFacade.from_config("fo")
    message = str(excinfo.value)
    assert message.startswith("unknown policy 'fo' (did you mean 'foo'?); installed policies: ")
    for name in ("fcfs", "foo", "priority"):
        assert name in message
    assert excinfo.value.installed == PolicyRegistry.discover().names()
    assert isinstance(excinfo.value, KeyError)
