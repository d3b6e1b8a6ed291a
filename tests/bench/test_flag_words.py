"""A bad bench option is answered in the command line's words (issue #38 item 10): the
flag, the value given and what it accepts, with a close match where one is near; never
the validation library's wording ("Input should be", "Value error", "bad bench
arguments: --:")."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bench_cli import schedkit

LIBRARY_WORDING = ("Input should", "Value error", "bad bench arguments", "bad sweep arguments")
WORKLOAD = "poisson:rate=4,n=20,prompt=100,output=10"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs 0: it must be greater than 0"),
        (["--jobs", "0"], "--jobs 0: it must be greater than 0"),
        (["--max-concurrency", "0"], "--max-concurrency 0: it must be at least 1"),
        (
            ["--kv-cache-dtype", "fp7"],
            "--kv-cache-dtype 'fp7': it must be one of auto, bfloat16, float16, fp8, fp8_e4m3"
            " or fp8_e5m2 (did you mean fp8?)",
        ),
        (["--rate-scale", "1,2", "--knee-factor", "0.5"], "--knee-factor 0.5: it must be greater"),
        (["--rate-scale", "1,2", "--attainment", "2"], "--attainment 2.0: it must be at most 1"),
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
