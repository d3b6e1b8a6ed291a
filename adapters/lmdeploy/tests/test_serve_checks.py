"""``schedkit serve lmdeploy`` refuses a ``--tp`` the model's heads cannot be split over
before LMDeploy starts (LMDeploy itself asserts it once its engine loads the model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedkit.errors import SchedkitError
from schedkit.testing.models import tiny_llama

from schedkit_lmdeploy.serve import TP_UNCHECKED, check_engine_args

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama's config.json as transformers writes it (4 heads); no weights needed."""
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"), weights=False)


@pytest.mark.parametrize("tp", [["--tp", "3"], ["--tp=3"]])
@pytest.mark.parametrize("command", [["serve", "api_server"], ["chat"]])
def test_the_degree_is_checked_for_the_commands_that_take_it(
    tiny_model: Path, tp: list[str], command: list[str]
) -> None:
    with pytest.raises(SchedkitError) as info:
        check_engine_args([*command, str(tiny_model), *tp])
    assert str(info.value) == (
        f"--tp 3 does not divide the model's 4 attention heads ({tiny_model}); use one of 1, 2, 4"
    )
    check_engine_args([*command, str(tiny_model), "--tp", "2"])


def test_kv_heads_are_checked_as_lmdeploy_splits_them(tmp_path: Path) -> None:
    config = {"num_attention_heads": 24, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SchedkitError, match="neither divides the model's 8 KV heads"):
        check_engine_args(["serve", "api_server", str(tmp_path), "--tp", "12"])
    check_engine_args(["serve", "api_server", str(tmp_path), "--tp", "24"])


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "api_server", "MODEL", "--tp", "3", "--dp", "2"],  # attention over tp/dp
        ["serve", "api_server", "MODEL", "--tp", "3", "--ep", "4"],
        ["serve", "api_server", "--tp", "3", "MODEL"],  # the model not first: not looked for
    ],
)
def test_what_lmdeploy_splits_otherwise_is_left_to_it(tiny_model: Path, args: list[str]) -> None:
    assert {"--dp", "--ep"} == set(TP_UNCHECKED)
    check_engine_args([str(tiny_model) if a == "MODEL" else a for a in args])


def test_serve_refuses_the_degree_in_one_line_before_lmdeploy_starts(tiny_model: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="80")
    for name in ("SCHEDKIT_CONFIG", "SCHEDKIT_POLICY", "SCHEDKIT_OPTIONS"):
        env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run(
        [SCHEDKIT, "serve", "lmdeploy", "--policy", "fcfs", "--", "serve", "api_server",
         str(tiny_model), "--tp", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: --tp 3 does not divide the model's 4 attention heads ({tiny_model});"
        " use one of 1, 2, 4"
    ]  # one line: no traceback, and no "schedkit: python -m schedkit_lmdeploy..." line
    assert elapsed < 20, elapsed
