"""What the ``schedkit serve <engine>`` launchers share: option lookup, the metrics dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedkit.errors import SchedkitError
from schedkit.serving import find_option, metrics_dir, option_value


def test_find_option_gives_the_last_one_and_its_span() -> None:
    args = ["--model", "m", "--device", "cuda", "--x", "--device=cpu"]
    assert find_option(args, "--device") == (5, 6, "cpu")
    assert find_option(args[:4], "--device") == (2, 4, "cuda")
    assert option_value(args, "--device") == "cpu"
    assert find_option(args, "--dev") is None  # a prefix is not the option
    assert option_value(args, "--port") is None


def test_underscore_spelling_only_when_asked() -> None:
    args = ["--additional_config", "{}", "--scheduler_cls=my.Sched"]
    assert find_option(args, "--additional-config") is None
    assert find_option(args, "--additional-config", underscores=True) == (0, 2, "{}")
    assert option_value(args, "--scheduler-cls", underscores=True) == "my.Sched"


def test_option_without_value_is_refused() -> None:
    with pytest.raises(SchedkitError, match=r"^--device needs a value$"):
        find_option(["--model", "m", "--device"], "--device")
    with pytest.raises(SchedkitError, match=r"^--scheduler-cls needs a value$"):
        option_value(["--scheduler_cls"], "--scheduler-cls", underscores=True)


def test_metrics_dir_is_fresh_and_removed() -> None:
    with metrics_dir("schedkit-test-metrics-") as path:
        assert path is not None and Path(path).is_dir()
        assert Path(path).name.startswith("schedkit-test-metrics-")
        (Path(path) / "counter_1.db").write_bytes(b"x")
    assert not Path(path).exists()
    with metrics_dir("schedkit-test-metrics-", wanted=False) as none:
        assert none is None
