"""pytest plugin: vLLM's own ``tests/v1/core`` with schedkit's scheduler classes in place.

Loaded as ``-p schedkit_upstream`` (``adapters/vllm/upstream`` on ``PYTHONPATH``) by
``adapters/vllm/scripts/test-upstream.sh``, over the tests ``fetch_tests.py`` extracted
from the installed vLLM's sdist. ``--schedkit-mode`` picks what runs:

- ``stock``: vLLM's own classes, untouched (the baseline);
- ``none``: ``schedkit_vllm.Scheduler``/``AsyncScheduler`` with no schedkit config;
- ``fcfs``, ``priority``: the same classes with that policy (``SCHEDKIT_CONFIG``), vLLM's
  ``--scheduling-policy`` as each test sets it;
- ``priority-on-fcfs``: the ``priority`` policy, with every scheduler a test builds for
  vLLM's priority mode built for vLLM's fcfs mode instead: schedkit's policy alone must
  then do what vLLM's priority mode does (victims included, connector or not).

The swap: after collection, every global of a ``tests.*`` module bound to vLLM's
``Scheduler`` or ``AsyncScheduler`` is rebound to schedkit's subclass. That covers
``tests/v1/core/utils.py::create_scheduler`` and the tests that construct a scheduler
themselves; vLLM's own modules are not touched (its diffusion schedulers, for one, stay
subclasses of the stock classes). A schedkit run that swaps nothing, builds no schedkit
scheduler, or builds one without the mode's policy, fails.

Tests that need a multimodal model, a GPU or the network are deselected by name
(``selection.DESELECTED``, with the reason, listed in the stock run's summary). The
text-only models the scheduler tests name only for their ``config.json`` get local
stand-ins (``selection.STAND_INS``) in ``$HF_HUB_CACHE``, which must be set, with
``HF_HUB_OFFLINE=1``. ``--schedkit-passed FILE`` writes the node ids of the tests that
passed, ``--schedkit-excused FILE`` those of the mode's ``KNOWN_DIFFERENCES`` (node id,
tab, reason), for the script to compare the modes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from schedkit_upstream.selection import (
    DESELECTED,
    DESELECTED_NAMES,
    KNOWN_DIFFERENCES,
    STAND_IN_REVISION,
    STAND_INS,
    match,
)

# mode -> the schedkit policy it selects (None: no schedkit config)
MODES: dict[str, str | None] = {
    "stock": None,
    "none": None,
    "fcfs": "fcfs",
    "priority": "priority",
    "priority-on-fcfs": "priority",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("schedkit-upstream")
    group.addoption("--schedkit-mode", choices=list(MODES), default="stock")
    group.addoption("--schedkit-passed", metavar="FILE", default=None)
    group.addoption("--schedkit-excused", metavar="FILE", default=None)


class _Lane:
    """One run's state: the mode, the swap, what was deselected, what passed."""

    def __init__(self, config: pytest.Config) -> None:
        self.mode: str = config.getoption("--schedkit-mode")
        self.policy = MODES[self.mode]
        self.passed_file: str | None = config.getoption("--schedkit-passed")
        self.excused_file: str | None = config.getoption("--schedkit-excused")
        self.passed: list[str] = []
        self.excused: dict[str, str] = {}
        self.deselected: Counter[str] = Counter()
        self.swapped: list[str] = []
        self.built: Counter[str] = Counter()
        self.config_file: str | None = None


_lane: _Lane | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _lane
    _lane = lane = _Lane(config)
    config.addinivalue_line("markers", "cpu_test: vLLM's CI marker (runs on CPU)")
    config.addinivalue_line("markers", "distributed: vLLM's CI marker")
    config.addinivalue_line("markers", "skip_global_cleanup: vLLM's CI marker")
    _write_stand_ins()
    _pick_device()
    os.environ.pop("SCHEDKIT_CONFIG", None)
    if lane.policy is not None:
        handle, path = tempfile.mkstemp(prefix="schedkit-upstream-", suffix=".json")
        with os.fdopen(handle, "w") as f:
            json.dump({"policy": [lane.policy]}, f)
        lane.config_file = os.environ["SCHEDKIT_CONFIG"] = path
    if lane.mode != "stock":
        _watch_schedulers(lane)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _lane is not None and _lane.config_file:
        Path(_lane.config_file).unlink(missing_ok=True)


def _write_stand_ins() -> None:
    hub = os.environ.get("HF_HUB_CACHE")
    if not hub or os.environ.get("HF_HUB_OFFLINE") != "1":
        raise pytest.UsageError(
            "schedkit_upstream: set HF_HUB_CACHE (a directory of the lane's own) and"
            " HF_HUB_OFFLINE=1; the plugin puts the models' stand-in configs there"
        )
    for repo, config in STAND_INS.items():
        root = Path(hub) / ("models--" + repo.replace("/", "--"))
        if root.exists():  # a real download, or an earlier run's stand-in
            continue
        snapshot = root / "snapshots" / STAND_IN_REVISION
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(config, indent=1))
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(STAND_IN_REVISION)


def _pick_device() -> None:
    """Where vLLM detects no device (an accelerator wheel, e.g. the official CUDA one,
    on a host without it), vLLM's configs are built for the CPU, as the adapter's
    model-less harness builds its own (``model_less_device``): the scheduler tests never
    touch a device, and vLLM's CPU platform (``VLLM_TARGET_DEVICE=cpu``) would refuse
    0.34's CUDA wheel on x86 without triton-cpu. A VLLM_TARGET_DEVICE of the caller's
    is left to vLLM."""
    if "VLLM_TARGET_DEVICE" in os.environ:
        return
    from vllm.config import DeviceConfig

    from schedkit_vllm.harness.modelless import model_less_device

    if model_less_device() == "auto":
        return
    post_init = DeviceConfig.__post_init__

    def on_cpu(self: Any) -> None:
        if self.device == "auto":
            self.device = "cpu"
        post_init(self)

    DeviceConfig.__post_init__ = on_cpu


def _watch_schedulers(lane: _Lane) -> None:
    """Count the schedkit schedulers the tests build, and those with policies; in
    ``priority-on-fcfs``, build those meant for vLLM's priority mode for its fcfs mode."""
    from schedkit_vllm.scheduler import SchedkitSchedulerMixin

    init = SchedkitSchedulerMixin.__init__
    on_fcfs = lane.mode == "priority-on-fcfs"

    def watched_init(self: Any, *args: Any, **kwargs: Any) -> None:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        if on_fcfs and vllm_config.scheduler_config.policy == "priority":
            vllm_config.scheduler_config.policy = "fcfs"
            lane.built["moved from vLLM's priority mode to fcfs"] += 1
        init(self, *args, **kwargs)
        lane.built["schedkit"] += 1
        if self.schedkit is not None:
            lane.built[f"with {self.schedkit.facade.label}"] += 1

    SchedkitSchedulerMixin.__init__ = watched_init  # type: ignore[method-assign]


def pytest_report_header(config: pytest.Config) -> list[str]:
    assert _lane is not None
    from vllm.config import DeviceConfig

    device = os.environ.get("VLLM_TARGET_DEVICE") or DeviceConfig().device_type
    return [f"schedkit-upstream: mode {_lane.mode}, vLLM's configs for device {device}"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    lane = _lane
    assert lane is not None
    kept, dropped = [], []
    known = KNOWN_DIFFERENCES.get(lane.mode, {})
    for item in items:
        name = match(item.nodeid, DESELECTED_NAMES)
        if name is None:
            kept.append(item)
            excuse = match(item.nodeid, known)
            if excuse is not None:
                lane.excused[item.nodeid] = known[excuse]
        else:
            dropped.append(item)
            lane.deselected[name] += 1
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if lane.mode != "stock":
        _swap(lane)


def _swap(lane: _Lane) -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    import schedkit_vllm

    ours = {Scheduler: schedkit_vllm.Scheduler, AsyncScheduler: schedkit_vllm.AsyncScheduler}
    for name, module in sorted(sys.modules.items()):
        if module is None or not (name == "tests" or name.startswith("tests.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in ours:
                setattr(module, attr, ours[value])
                lane.swapped.append(f"{name}.{attr}")
    if "tests.v1.core.utils.Scheduler" not in lane.swapped:
        raise pytest.UsageError(
            "schedkit_upstream: tests/v1/core/utils.py no longer binds vLLM's Scheduler"
            f" as `Scheduler` (swapped: {lane.swapped}); update the plugin's swap"
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _lane is not None and report.when == "call" and report.passed:
        _lane.passed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    lane = _lane
    if lane is None:
        return
    if lane.passed_file:
        Path(lane.passed_file).write_text("".join(f"{n}\n" for n in sorted(lane.passed)))
    if lane.excused_file:
        lines = (f"{n}\t{why}\n" for n, why in sorted(lane.excused.items()))
        Path(lane.excused_file).write_text("".join(lines))
    if lane.mode != "stock" and session.testscollected and _built_wrong(lane):
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lane = _lane
    if lane is None:
        return
    write = terminalreporter.write_line
    if lane.mode == "stock":  # the same in every mode
        for reason, names in DESELECTED.items():
            tests = sum(lane.deselected[n] for n in names)
            if tests:
                write(f"schedkit-upstream: deselected {tests} tests that need {reason}:")
                write("schedkit-upstream:     " + ", ".join(n for n in names if lane.deselected[n]))
        unmatched = sum(1 for n in DESELECTED_NAMES if not lane.deselected[n])
        if unmatched:
            write(
                f"schedkit-upstream: {unmatched} of the {len(DESELECTED_NAMES)} deselected names"
                " match no test collected here (another vLLM version's, or left out by -k)"
            )
        return
    write(f"schedkit-upstream: swapped {len(lane.swapped)} names: {', '.join(lane.swapped)}")
    built = ", ".join(f"{n} {k}" for k, n in sorted(lane.built.items())) or "none"
    write(f"schedkit-upstream: schedulers built: {built}")
    problem = _built_wrong(lane)
    if problem:
        write(f"schedkit-upstream: ERROR: {problem}")


def _built_wrong(lane: _Lane) -> str | None:
    """What is wrong with the schedulers this (schedkit) run built, if anything."""
    if not lane.built["schedkit"]:
        return "no schedkit scheduler was built"
    with_policy = sum(n for k, n in lane.built.items() if k.startswith("with "))
    if lane.policy is None and with_policy:
        return "a scheduler got policies with no schedkit config"
    if lane.policy is not None and lane.built[f"with {lane.policy}"] != lane.built["schedkit"]:
        return f"not every schedkit scheduler was built with the {lane.policy} policy"
    return None
