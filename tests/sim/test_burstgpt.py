"""BurstGPT CSV traces as workloads (schedkit.workload.formats.burstgpt), told from Azure's by the
header. The rows are in BurstGPT's published format (its README's first rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedkit.errors import SchedkitError
from schedkit.workload import load_workload

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
ROWS = [
    "5,ChatGPT,472,18,490,Conversation log",
    "45,ChatGPT,1087,0,1087,Conversation log",  # failed in the service: skipped
    "118,GPT-4,417,30,447,Conversation log",
    '140,"ChatGPT",1360,195,1555,"API log"',
]


def write(path: Path, rows: list[str], newline: str = "\n") -> str:
    path.write_text(newline.join([HEADER, *rows]) + newline)
    return str(path)


def test_rows_become_requests_with_the_model_as_tenant(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path / "burst.csv", ROWS))
    shape = [(r.arrival_s, r.tenant, r.prompt_tokens, r.output_tokens) for r in workload.requests]
    assert shape == [(0.0, "ChatGPT", 472, 18), (113.0, "GPT-4", 417, 30),
                     (135.0, "ChatGPT", 1360, 195)]  # fmt: skip
    assert "1 failed requests (0 response tokens) skipped" in workload.source
    assert workload.requests[0].request_id == "burst-000000"
    crlf = load_workload(write(tmp_path / "crlf.csv", ROWS, "\r\n"))
    assert [r.prompt_tokens for r in crlf.requests] == [472, 417, 1360]
    first = load_workload(write(tmp_path / "first.csv", ROWS), max_requests=2)
    assert [r.output_tokens for r in first.requests] == [18, 30]


def test_an_azure_trace_is_still_read_as_azure(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,10\n")
    [request] = load_workload(str(path)).requests
    assert (request.prompt_tokens, request.output_tokens, request.tenant) == (100, 10, "default")


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (
            "7,ChatGPT,many,18,490,Conversation log",
            r"line 3: Request tokens must be a non-negative",
        ),
        ("-1,ChatGPT,10,18,28,Conversation log", r"line 3: Timestamp must be a finite number"),
        ("7,ChatGPT,10,18", r"line 3: expected 6 columns, got 4"),
    ],
)
def test_a_bad_row_names_its_line_and_column(tmp_path: Path, row: str, problem: str) -> None:
    with pytest.raises(SchedkitError, match=problem):
        load_workload(write(tmp_path / "bad.csv", [ROWS[0], row]))


def test_only_failed_rows_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SchedkitError, match="no completed requests"):
        load_workload(write(tmp_path / "failed.csv", [ROWS[1]]))
