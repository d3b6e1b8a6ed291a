"""A bad bench option is answered in the command line's words (issue #38 item 10): the
flag, the value given and what it accepts, with a close match where one is near; never
the validation library's wording ("Input should be", "Value error", "bad bench
arguments: --:")."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bench_cli import schedkit

LIBRARY_WORDING = (
    "Input should", "Value error", "Extra inputs are not permitted", "For further information",
    "bad bench arguments", "bad sweep arguments",
)  # fmt: skip
WORKLOAD = "poisson:rate=4,n=20,prompt=100,output=10"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--max-num-seqs", "0"],
            "error: --max-num-seqs: 0 is not accepted; it takes an integer greater than 0",
        ),
        (["--jobs", "0"], "error: --jobs: 0 is not accepted; it takes an integer greater than 0"),
        (
            ["--max-concurrency", "0"],
            "error: --max-concurrency: 0 is not accepted; it takes an integer of at least 1",
        ),
        (
            ["--replicas", "0"],
            "error: --replicas: 0 is not accepted; it takes an integer from 1 to 1024",
        ),
        (
            ["--kv-cache-dtype", "fp7"],
            "error: --kv-cache-dtype: 'fp7' is not accepted; it takes 'auto', 'bfloat16',"
            " 'float16', 'fp8', 'fp8_e4m3' or 'fp8_e5m2' (did you mean 'fp8'?)",
        ),
        (
            ["--rate-scale", "1,2", "--knee-factor", "0.5"],
            "error: --knee-factor: 0.5 is not accepted; it takes a number greater than 1 and at"
            " most 1000",
        ),
        (
            ["--rate-scale", "1,2", "--attainment", "2"],
            "error: --attainment: 2.0 is not accepted; it takes a number greater than 0 and at"
            " most 1",
        ),
        (["--no-policy"], "No such option: --no-policy"),
    ],
)
def test_a_bad_flag_names_itself_its_value_and_what_it_takes(
    tmp_path: Path, args: list[str], words: str
) -> None:
    out = tmp_path / "out"
    proc = schedkit("bench", "--workload", WORKLOAD, "--policy", "fcfs", *args, "--out", str(out))
    assert proc.returncode == 2
    said = " ".join(proc.stderr.split())
    assert words in said
    assert not any(w in said for w in LIBRARY_WORDING), said
    assert "Traceback" not in said and not out.exists()


def test_no_arm_is_one_plain_sentence(tmp_path: Path) -> None:
    proc = schedkit("bench", "--workload", WORKLOAD, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    said = " ".join(proc.stderr.split())
    assert "error: no arm to run: give --policy NAME or --arm policy=NAME" in said
    assert "--:" not in said and "--spec" not in said


def test_a_bad_config_file_as_an_arm_names_the_key(tmp_path: Path) -> None:
    """``--policy FILE`` with a misspelt key or a refused value: the file, the key, the
    value and what it takes, with a close match, in the words the flags use."""
    keys = "policy, options, trust, record_steps, hook_budget_ms, hook_budget_hard"
    for text, words in [
        (
            'polcy = "fcfs"\n',
            f"unknown key 'polcy'; valid keys: {keys} (did you mean 'policy'?)",
        ),
        (
            'policy = "fcfs"\nhook_budget_ms = 0\n',
            "hook_budget_ms: 0 is not accepted; it takes a number greater than 0 and at most 60000",
        ),
        (
            'policy = "sjf"\n[options]\nsjf = 3\n',
            "options.sjf: 3 is not accepted; it takes an object",
        ),
    ]:
        path = tmp_path / "bad.toml"
        path.write_text(text)
        out = tmp_path / "out"
        proc = schedkit("bench", "--workload", WORKLOAD, "--policy", str(path), "--out", str(out))
        assert proc.returncode == 2, proc.stderr
        said = " ".join(proc.stderr.split())
        assert f"error: invalid schedkit config file {path}: {words}" in said, said
        assert not any(w in said for w in LIBRARY_WORDING), said
        assert "Traceback" not in said and not out.exists()
