"""``schedkit serve vllm`` refuses a tensor-parallel degree the model's heads cannot be
split over before vLLM starts (vLLM itself fails ~30 s later, with a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedkit.errors import SchedkitError

from schedkit_vllm.serve import check_engine_args

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")


def _model(path: Path, heads: int, kv_heads: int) -> Path:
    path.mkdir()
    config = {"num_attention_heads": heads, "num_key_value_heads": kv_heads}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    ("tp", "flag"),
    [
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size"),
        (["--tensor-parallel-size=3"], "--tensor-parallel-size"),
        (["-tp", "3"], "-tp"),
        (["--tensor_parallel_size", "3"], "--tensor_parallel_size"),
    ],
)
def test_every_spelling_of_the_degree_is_checked(model_dir: Path, tp: list[str], flag: str) -> None:
    with pytest.raises(SchedkitError) as info:
        check_engine_args(["--model", str(model_dir), *tp])
    assert str(info.value) == (
        f"{flag} 3 does not divide the model's 4 attention heads ({model_dir}); use one of 1, 2, 4"
    )
    check_engine_args(["--model", str(model_dir), "-tp", "2"])


def test_the_config_comes_from_hf_config_path_when_given(tmp_path: Path) -> None:
    weights = _model(tmp_path / "weights", 32, 8)
    config = _model(tmp_path / "config", 6, 6)
    args = ["--model", str(weights), "--hf-config-path", str(config), "-tp", "4"]
    with pytest.raises(SchedkitError, match=r"^-tp 4 does not divide the model's 6 attention"):
        check_engine_args(args)
    check_engine_args(["--model", str(weights), "-tp", "4"])


def test_kv_heads_are_checked_as_vllm_splits_them(tmp_path: Path) -> None:
    model = _model(tmp_path / "m", 28, 4)  # Qwen2.5-7B's heads
    with pytest.raises(SchedkitError, match="neither divides the model's 4 KV heads"):
        check_engine_args(["--model", str(model), "-tp", "14"])
    check_engine_args(["--model", str(model), "-tp", "28"])  # 7 replicas of each KV head


def test_hf_overrides_leave_the_check_to_vllm(model_dir: Path) -> None:
    args = ["--model", str(model_dir), "-tp", "3", "--hf-overrides", '{"num_attention_heads": 6}']
    check_engine_args(args)


def test_serve_refuses_the_degree_in_one_line_before_vllm_starts(model_dir: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="80")
    for name in ("SCHEDKIT_CONFIG", "SCHEDKIT_POLICY", "SCHEDKIT_OPTIONS"):
        env.pop(name, None)
    command = [SCHEDKIT, "serve", "vllm", "--policy", "fcfs", "--", "--model", str(model_dir)]
    start = time.monotonic()
    done = subprocess.run(
        [*command, "--tensor-parallel-size", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: --tensor-parallel-size 3 does not divide the model's 4 attention heads"
        f" ({model_dir}); use one of 1, 2, 4"
    ]  # one line: no traceback, and no "schedkit: python -m vllm..." launch line
    assert elapsed < 20, elapsed
