"""The trace readers: real-world CSV shapes (Azure 2023 and 2024, BOM, CRLF, quoted cells
holding commas, quotes and line breaks), the csv and pyarrow readers agreeing to the bit,
reads that stop at ``max_requests``, and bad input that fails fast with the line named."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit.errors import SchedkitError
from schedkit.inputs import MAX_LINE_BYTES
from schedkit.workload import TraceRequest, load_workload
from schedkit.workload.formats import azure
from schedkit.workload.formats.azure import Reader, parse_azure_csv
from schedkit.workload.formats.azure_csv import read_azure_rows
from schedkit.workload.limits import MAX_REQUESTS_VAR
from schedkit.workload.source import TraceSource

HAVE_PYARROW = importlib.util.find_spec("pyarrow") is not None
READERS = [
    "csv",
    pytest.param("pyarrow", marks=pytest.mark.skipif(not HAVE_PYARROW, reason="no pyarrow")),
]
needs_pyarrow = pytest.mark.skipif(not HAVE_PYARROW, reason="pyarrow is not installed")


def source_of(data: bytes, origin: str = "t.csv") -> TraceSource:
    return TraceSource(origin, lambda: io.BytesIO(data), len(data))


def requests(
    data: bytes, reader: Reader = "csv", max_rows: int | None = None
) -> list[TraceRequest]:
    return parse_azure_csv(source_of(data), "t", max_rows, reader)


def pyarrow_rows(data: bytes, max_rows: int | None = None) -> object:
    from schedkit.workload.formats.azure_arrow import read_azure_rows_pyarrow

    return read_azure_rows_pyarrow(source_of(data), max_rows)


def columns(reqs: list[TraceRequest]) -> list[tuple[float, int, int]]:
    return [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs]


# --- real-world shapes -------------------------------------------------------------------------

ROWS = [(0.0, 374, 44), (4.314579, 396, 109), (86_400.5, 7, 1)]  # the last one a day later
SHAPES = {
    "azure-2023": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-17 18:15:47.1805900,7,1\n"
    ),
    "azure-2024": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,374,44\n"
        "2024-05-10 00:00:04.324509+00:00,396,109\n"
        "2024-05-11 00:00:00.509930+00:00,7,1\n"
    ),
    "bom-crlf": (
        "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        "2023-11-16 18:15:46.6805900,374,44\r\n"
        "2023-11-16 18:15:50.9951690,396,109\r\n"
        "2023-11-17 18:15:47.1805900,7,1\r\n"
    ),
    "quoted": (
        '"TIMESTAMP","ContextTokens","GeneratedTokens"\n'
        '"2024-05-10 02:00:00.009930+02:00","374","44"\n'
        '"2024-05-09 19:00:04.324509-05:00",396,"109"\n'
        "2024-05-11T00:00:00.509930Z,7,1\n"
    ),
    # Cells holding a comma, doubled quotes and line breaks (LF and CRLF), columns reordered,
    # a blank line: one request a record, whatever the physical lines.
    "multiline-cells": (
        "note, GeneratedTokens ,TIMESTAMP,ContextTokens\r\n"
        '"first, with ""quotes""\nand a second line",44,2023-11-16 18:15:46.6805900,374\r\n'
        "\r\n"
        '"",109,2023-11-16 18:15:50.9951690,396\r\n'
        '"a\r\nb\r\n,c",1,2023-11-17 18:15:47.1805900,7\r\n'
    ),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_real_world_shapes(shape: str, reader: Reader) -> None:
    data = SHAPES[shape].encode()
    got = columns(requests(data, reader))
    assert [(round(a, 6), p, o) for a, p, o in got] == ROWS
    assert got == columns(requests(data, "csv"))  # to the bit
    if reader == "pyarrow":
        assert pyarrow_rows(data) is not None  # read by pyarrow itself, not handed back


def test_request_ids_follow_the_rows_and_arrivals_the_earliest() -> None:
    data = SHAPES["azure-2023"].replace("18:15:46.68", "18:15:56.68").encode()  # now 2nd
    reqs = requests(data)
    assert [r.request_id for r in reqs] == ["t-000000", "t-000001", "t-000002"]
    assert [round(r.arrival_s, 6) for r in reqs] == [5.685421, 0.0, 86_396.185421]


def test_offsets_are_converted_to_utc() -> None:
    data = (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2024-05-10 23:30:00.25-01:00,1,1\n"  # 00:30:00.25 UTC on the 11th
        b"2024-05-11 02:00:00.5+0200,2,1\n"  # 00:00:00.5 UTC
        b"2024-05-11 00:00:00+00,3,1\n"
    )
    assert columns(requests(data)) == [(1800.25, 1, 1), (0.5, 2, 1), (0.0, 3, 1)]


@needs_pyarrow
@pytest.mark.parametrize(
    ("row", "declined"),
    [
        ("2023-11-16 18:15:46.68, 374 ,44", False),  # both trim spaces round a count
        ("2023-11-16 18:15:46.68,1_000,44", True),  # int() takes underscores; pyarrow does not
        ("2023-11-16 18:15:46.68,\u00a0374,44", True),  # nor Unicode spaces
        (" 2023-11-16 18:15:46.68,374,44", True),
        ("2023-11-16 23:59:60.5,374,44", True),  # a leap second
        ("2023-11-16 9:15:46.68,374,44", True),  # a one-digit hour
        ("2023-11-16 18:15:46.1234567891,374,44", True),  # finer than nanoseconds
        ("2023-11-16 18:15:46.68+00:00,374,44", True),  # an offset among times without
        ("   ", True),  # a line of spaces, skipped as blank
    ],
)
def test_pyarrow_declines_what_it_would_read_differently(row: str, declined: bool) -> None:
    data = f"{SHAPES['azure-2023']}{row}\n2023-11-16 18:15:47.0,5,5\n".encode()
    assert (pyarrow_rows(data) is None) == declined
    assert columns(requests(data, "pyarrow")) == columns(requests(data, "csv"))


_stamps = st.builds(
    lambda y, mo, d, h, mi, s, frac, sep: (
        f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}"
    ),
    st.integers(1970, 2200),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=9).map(lambda f: "." + f)),
    st.sampled_from([" ", "T"]),
)
_zones = st.sampled_from(["", "Z", "+00:00", "-05:30", "+0930", "+14", "-00:45"])


@needs_pyarrow
@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(_stamps, st.integers(0, 10**8), st.integers(0, 10**8)), min_size=1, max_size=40
    ),
    zone=_zones,
)
def test_pyarrow_reads_what_the_csv_reader_reads_to_the_bit(
    rows: list[tuple[str, int, int]], zone: str
) -> None:
    text = "".join(f"{stamp}{zone},{p},{o}\n" for stamp, p, o in rows)
    data = f"TIMESTAMP,ContextTokens,GeneratedTokens\n{text}".encode()
    expected = columns(requests(data, "csv"))
    assert pyarrow_rows(data) is not None
    assert columns(requests(data, "pyarrow")) == expected


def test_bundled_traces_read_alike_by_both_readers() -> None:
    from schedkit.workload.loader import _trace_source

    source = _trace_source(None, "azure-2023-code.csv.gz")
    by_csv = parse_azure_csv(source, "azure-code", reader="csv")
    assert by_csv == list(load_workload("azure-code").requests)
    if HAVE_PYARROW:
        from schedkit.workload.formats.azure_arrow import read_azure_rows_pyarrow

        assert read_azure_rows_pyarrow(source) is not None  # the real trace, not declined
        assert parse_azure_csv(source, "azure-code", reader="pyarrow") == by_csv


# --- truncated reads stop early ----------------------------------------------------------------


class EndlessTrace:
    """A trace file that never ends (``head``, then ``body`` over and over), counting the
    bytes read from it by every reader that opens it: a read that stops early reads a
    bounded prefix."""

    def __init__(self, head: bytes, body: bytes) -> None:
        self.head, self.body, self.bytes_read = head, body, 0

    def source(self) -> TraceSource:
        @contextmanager
        def opener() -> Iterator[io.RawIOBase]:
            yield _Endless(self)

        return TraceSource("endless.csv", opener, 1 << 40)


class _Endless(io.RawIOBase):
    def __init__(self, trace: EndlessTrace) -> None:
        super().__init__()
        self.trace, self.position = trace, 0

    def read(self, size: int = -1) -> bytes:
        assert size > 0
        head, body = self.trace.head, self.trace.body
        data = head[self.position : self.position + size]
        phase = max(0, self.position - len(head)) % len(body)
        repeats = (size - len(data)) // len(body) + 2
        data += (body * repeats)[phase : phase + size - len(data)]
        self.position += len(data)
        self.trace.bytes_read += len(data)
        return data


HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize("reader", READERS)
def test_a_truncated_read_stops_after_its_rows(reader: Reader) -> None:
    endless = EndlessTrace(HEADER, b"2024-05-10 00:00:00.009930+00:00,374,44\n")
    reqs = parse_azure_csv(endless.source(), "t", 20_000, reader)
    assert len(reqs) == 20_000
    assert endless.bytes_read < 4 << 20  # the rows (~0.8 MB), read in blocks of 1 MiB


def test_truncated_load_is_the_first_requests(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    good = SHAPES["azure-2024"]
    path.write_bytes(good.encode() + b"2024-05-12 00:00:00,not a count,1\n" + b"\xff" * 100)
    with pytest.raises(SchedkitError, match=r"mine\.csv: line 5: ContextTokens 'not a count'"):
        load_workload(str(path))
    short = load_workload(str(path), max_requests=2)  # the bad lines are never read
    assert [r.request_id for r in short.requests] == ["mine-000000", "mine-000001"]
    path.with_name("good.csv").write_text(good)
    full = load_workload(str(path.with_name("good.csv")))
    assert columns(list(short.requests)) == columns(list(full.truncated(2).requests))
    assert load_workload("azure-conv", max_requests=100).requests == (
        load_workload("azure-conv").truncated(100).requests
    )
    with pytest.raises(SchedkitError, match=r"^max_requests must be a positive integer"):
        load_workload("azure-conv", max_requests=0)


def test_truncated_jsonl_stops_after_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "mc.jsonl.gz"
    rows = b'{"timestamp": 5, "input_length": 10, "output_length": 1}\n' * 3
    path.write_bytes(gzip.compress(rows + b"not json\n"))
    assert len(load_workload(str(path), max_requests=3).requests) == 3
    with pytest.raises(SchedkitError, match=r"mc\.jsonl\.gz: line 4: not valid JSON"):
        load_workload(str(path))


@pytest.mark.parametrize("reader", READERS)
def test_the_request_limit_counts_every_row(
    reader: Reader, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = HEADER + b"2023-11-16 18:15:46.68,5,1\n" * 12
    monkeypatch.setenv(MAX_REQUESTS_VAR, "10")
    with pytest.raises(
        SchedkitError, match=r"^trace t\.csv would hold 12 requests, more than the limit of 10;"
    ):
        requests(data, reader)
    with pytest.raises(SchedkitError, match=r"^trace t\.csv would hold 11 requests"):
        requests(data, reader, max_rows=11)
    assert len(requests(data, reader, max_rows=10)) == 10


# --- bad input fails fast, naming the line -----------------------------------------------------


def test_errors_name_the_physical_line_after_multiline_cells() -> None:
    data = SHAPES["multiline-cells"] + '"x\ny",lots,2023-11-16 18:15:50.99,396\r\n'
    with pytest.raises(SchedkitError) as info:
        requests(data.encode())
    assert str(info.value) == "t.csv: line 10: GeneratedTokens 'lots' is not an integer token count"


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (  # a 1 GiB cell over many lines: csv.field_size_limit, set for the read
            b"x" * 99 + b"\n",
            "endless.csv: line 10,487: a cell is longer than 1,048,576 characters, the most one"
            ' may hold (a cell holds a time or a count); check the quoting: a quote (") left'
            " open runs a cell on over the lines that follow",
        ),
        (  # ... on one line
            b"x" * 100,
            "endless.csv: line 2 is longer than 1,048,576 bytes; a trace line holds one request"
            " (a few hundred bytes). Check that this is a trace file, with one request per line",
        ),
        (  # a row of endless short cells, each running over a line break
            b'\n",a,"',
            "endless.csv: line 349,516: one CSV row runs over more than 1,048,576 bytes; check"
            ' the quoting: a quote (") left open runs a cell on over the lines that follow',
        ),
    ],
)
def test_a_gigantic_cell_or_row_fails_after_its_first_mib(
    body: bytes, message: str, reader: Reader
) -> None:
    limit = csv.field_size_limit()
    endless = EndlessTrace(HEADER + b'2023-11-16 18:15:46.68,5,"', body)
    with pytest.raises(SchedkitError) as info:
        parse_azure_csv(endless.source(), "t", reader=reader)
    assert str(info.value) == message
    assert endless.bytes_read < 32 << 20  # not the 1 GiB, nor the endless file
    assert csv.field_size_limit() == limit  # restored


def test_a_long_line_or_binary_byte_in_a_later_block_is_placed_exactly() -> None:
    rows = b"2023-11-16 18:15:46.68,5,1\n" * 100_000  # 2.7 MB: several blocks
    with pytest.raises(
        SchedkitError, match=r"^t\.csv: line 100,002 is longer than 1,048,576 bytes"
    ):
        read_azure_rows(source_of(HEADER + rows + b"9" * (MAX_LINE_BYTES + 1)))
    longest = b"2023-11-16 18:15:46.68,5," + b"1".ljust(MAX_LINE_BYTES - 25) + b"\n"
    assert len(read_azure_rows(source_of(HEADER + rows + longest)).day) == 100_001  # at the limit
    offset = len(HEADER + rows) + 30
    with pytest.raises(SchedkitError) as info:
        read_azure_rows(source_of(HEADER + rows + b"2023-11-16 18:15:46.68,5,1 \xff\n"))
    assert str(info.value) == (
        f"workload file t.csv is not UTF-8 text (byte {offset - 3:,} is 0xff), so it looks like"
        " a binary file; pass a trace in CSV or JSONL text"
    )


def test_bad_timestamps_are_quoted_short() -> None:
    for stamp in [
        "2023-02-30 00:00:00",
        "2023-11-16 18:15",
        "2023-11-16 18:15:46+25:00",
        "x" * 5000,
    ]:
        data = HEADER + f"{stamp},5,1\n".encode()
        with pytest.raises(SchedkitError, match=r"^t\.csv: line 2: bad TIMESTAMP ") as info:
            requests(data)
        assert len(str(info.value)) < 300


# --- which reader ------------------------------------------------------------------------------


@needs_pyarrow
def test_auto_takes_pyarrow_only_for_large_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedkit.workload.formats import azure_arrow

    calls: list[int | None] = []
    real = azure_arrow.read_azure_rows_pyarrow

    def spy(source: TraceSource, max_rows: int | None = None) -> object:
        calls.append(max_rows)
        return real(source, max_rows)

    monkeypatch.setattr(azure_arrow, "read_azure_rows_pyarrow", spy)
    data = SHAPES["azure-2024"].encode()
    requests(data, "auto")
    assert calls == []  # small: the csv reader
    monkeypatch.setattr(azure, "PYARROW_MIN_BYTES", 10)
    monkeypatch.setattr(azure, "PYARROW_MIN_REQUESTS", 2)
    requests(data, "auto", max_rows=1)
    assert calls == []  # a short read: the csv reader
    assert columns(requests(data, "auto")) == columns(requests(data, "csv"))
    assert calls == [None]


def test_without_pyarrow_the_csv_module_reads(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_text(SHAPES["azure-2024"])
    script = (
        "import sys; sys.modules['pyarrow'] = None\n"  # import pyarrow -> ImportError
        "from schedkit.workload.formats import azure\n"
        "from schedkit.workload import load_workload\n"
        "azure.PYARROW_MIN_BYTES = azure.PYARROW_MIN_REQUESTS = 0\n"
        f"print(len(load_workload({str(path)!r}).requests))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"
