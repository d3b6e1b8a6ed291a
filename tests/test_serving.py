"""What the ``schedkit serve <engine>`` launchers share: option lookup, the metrics dir, the
tensor-parallel check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedkit.edge.serving import (
    check_tensor_parallel,
    find_option,
    last_option,
    metrics_dir,
    option_value,
)
from schedkit.errors import SchedkitError


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


def test_last_option_is_the_last_of_its_spellings() -> None:
    names = ("--tensor-parallel-size", "-tp")
    assert last_option(["-tp", "2", "--tensor-parallel-size=4"], names) == (
        "--tensor-parallel-size",
        "4",
    )
    assert last_option(["--tensor-parallel-size", "4", "-tp=2"], names) == ("-tp", "2")
    assert last_option(["--tensor_parallel_size", "8"], names, underscores=True) == (
        "--tensor_parallel_size",
        "8",
    )
    assert last_option(["--model", "m"], names) is None


TP = ("--tensor-parallel-size", "-tp")


@pytest.fixture
def model(tmp_path: Path) -> str:
    """A model directory with 4 attention heads and 2 KV heads: degrees 1, 2, 4."""
    config = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size"),
        (["--tensor-parallel-size=3"], "--tensor-parallel-size"),
        (["-tp", "3"], "-tp"),
        (["-tp=3"], "-tp"),
        (["--tensor_parallel_size", "3"], "--tensor_parallel_size"),  # vLLM takes it too
        (["-tp", "2", "--tensor-parallel-size", "3"], "--tensor-parallel-size"),  # the last
    ],
)
def test_a_degree_that_does_not_divide_the_heads_is_refused(
    model: str, args: list[str], flag: str
) -> None:
    message = (
        f"{flag} 3 does not divide the model's 4 attention heads ({model}); use one of 1, 2, 4"
    )
    with pytest.raises(SchedkitError) as info:
        check_tensor_parallel(["--model", model, *args], TP, model, underscores=True)
    assert str(info.value) == message
    assert "\n" not in message


def test_a_degree_that_does_not_split_the_kv_heads_is_refused(tmp_path: Path) -> None:
    config = {"num_attention_heads": 28, "num_key_value_heads": 4}  # Qwen2.5-7B
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SchedkitError) as info:
        check_tensor_parallel(["--tensor-parallel-size", "14"], TP, str(tmp_path))
    assert str(info.value) == (
        "--tensor-parallel-size 14 neither divides the model's 4 KV heads nor is a multiple of"
        f" them ({tmp_path}); use one of 1, 2, 4, 28"
    )


@pytest.mark.parametrize("args", [["-tp", "1"], ["-tp", "2"], ["-tp=4"], ["--port", "3"], []])
def test_a_degree_that_splits_the_heads_passes(model: str, args: list[str]) -> None:
    check_tensor_parallel(args, TP, model)


def test_what_cannot_be_checked_is_left_to_the_engine(model: str, tmp_path: Path) -> None:
    check_tensor_parallel(["-tp", "3"], TP, None)  # no model named
    check_tensor_parallel(["-tp", "3"], TP, str(tmp_path / "nowhere"))  # not on this machine
    check_tensor_parallel(["-tp", "3"], TP, "org/not-downloaded", environ={})
    check_tensor_parallel(["-tp", "three"], TP, model)  # the engine's parser says why
    check_tensor_parallel(["-tp", "0"], TP, model)
    unchecked = ("--hf-overrides",)  # options that change the split or the heads
    for given in (["--hf-overrides", "{}"], ["--hf_overrides={}"], ["--hf-overrides.x", "1"]):
        check_tensor_parallel(["-tp", "3", *given], TP, model, underscores=True, unless=unchecked)
    with pytest.raises(SchedkitError):
        check_tensor_parallel(["-tp", "3", "--hf-config"], TP, model, unless=unchecked)


def test_a_hub_model_in_the_cache_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "hub" / "models--org--tiny"
    (folder / "snapshots" / "c0ffee").mkdir(parents=True)
    (folder / "snapshots" / "c0ffee" / "config.json").write_text('{"num_attention_heads": 6}')
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("c0ffee")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    with pytest.raises(SchedkitError, match=r"^-tp 4 does not divide .* 6 attention heads"):
        check_tensor_parallel(["-tp", "4"], TP, "org/tiny", environ=env)
    check_tensor_parallel(["-tp", "4", "--revision", "v9"], TP, "org/tiny", environ=env)
    with pytest.raises(SchedkitError, match=r"use one of 1, 2, 3, 6$"):
        check_tensor_parallel(["-tp", "4", "--download-dir", str(tmp_path / "hub")], TP, "org/tiny")
