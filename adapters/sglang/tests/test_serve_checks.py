"""``schedkit serve sglang`` refuses a tensor-parallel degree the model's heads cannot be
split over before SGLang starts (SGLang itself fails once its scheduler loads the model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedkit.errors import SchedkitError

from schedkit_sglang.serve import TP_UNCHECKED, check_engine_args

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--tp-size", "3"], "--tp-size"),
        (["--tp-size=3"], "--tp-size"),
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size"),
        (["--tensor-parallel-size=3"], "--tensor-parallel-size"),
        (["--tp-size", "2", "--tensor-parallel-size", "3"], "--tensor-parallel-size"),
    ],
)
@pytest.mark.parametrize("model_flag", ["--model-path", "--model"])
def test_every_spelling_of_the_degree_is_checked(
    model_dir: Path, args: list[str], flag: str, model_flag: str
) -> None:
    with pytest.raises(SchedkitError) as info:
        check_engine_args([model_flag, str(model_dir), *args])
    assert str(info.value) == (
        f"{flag} 3 does not divide the model's 4 attention heads ({model_dir}); use one of 1, 2, 4"
    )
    check_engine_args([model_flag, str(model_dir), "--tp-size", "2"])


def test_kv_heads_are_checked_as_sglang_splits_them(tmp_path: Path) -> None:
    config = {"num_attention_heads": 24, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SchedkitError, match=r"8 KV heads .*; use one of 1, 2, 4, 8, 24$"):
        check_engine_args(["--model-path", str(tmp_path), "--tp-size", "12"])
    check_engine_args(["--model-path", str(tmp_path), "--tp-size", "24"])  # 3 replicas each


@pytest.mark.parametrize("unchecked", TP_UNCHECKED)
def test_attention_data_or_context_parallelism_leaves_the_check_to_sglang(
    model_dir: Path, unchecked: str
) -> None:
    check_engine_args(["--model-path", str(model_dir), "--tp-size", "3", unchecked, "3"])


def test_serve_refuses_the_degree_in_one_line_before_sglang_starts(model_dir: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="80")
    for name in ("SCHEDKIT_CONFIG", "SCHEDKIT_POLICY", "SCHEDKIT_OPTIONS"):
        env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run(
        [SCHEDKIT, "serve", "sglang", "--policy", "fcfs", "--", "--model-path", str(model_dir),
         "--device", "cpu", "--tensor-parallel-size", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: --tensor-parallel-size 3 does not divide the model's 4 attention heads"
        f" ({model_dir}); use one of 1, 2, 4"
    ]  # one line: no traceback, and no "schedkit: python -m sglang..." launch line
    assert elapsed < 20, elapsed
