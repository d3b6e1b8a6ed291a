"""Request files with prompt text as workloads: ``vllm bench serve``'s custom JSONL and
ShareGPT JSON, guidellm's JSONL and CSV data files.

Their prompts are text, so token counts come from the model's tokenizer (``--tokenizer``,
a Hugging Face name or a local directory or ``tokenizer.json``; ``transformers`` or
``tokenizers`` reads it). A row's prompt is its first text column in guidellm's order
(``prompt``, ``instruction``, ``question``, ``input``, ``context``, ``content``,
``conversation``, ``turn``, ``text``) after its prefix column if any (``system_prompt``,
``system``, ``prefix``); ShareGPT's is the first turn of ``conversations`` and its output
the second turn's length, filtered as vLLM filters (4 to 1,024 prompt tokens, at least 4
output tokens, 2,048 in all). Outputs: ``output_tokens`` (vLLM) or
``output_tokens_count``/``completion_tokens_count`` (guidellm), else 256 tokens, the
default of ``vllm bench serve --custom-output-len``. A guidellm row with
``prompt_tokens_count`` needs no tokenizer (its prompt is then not hashed).

Requests keep the file's order: ``vllm bench serve --disable-shuffle`` replays the same
ones in the same order (with ``--skip-chat-template`` for custom files, whose prompts vLLM
otherwise counts inside its chat template), as guidellm does by default.

These files carry no arrival times: arrivals are a Poisson process at 1 request/s (drawn
once, from seed 0, as a trace's are fixed), set to a rate with ``--request-rate``
(``--rate-scale`` multiplies it).
Prompts are hashed in 16-token blocks (vLLM's default block size) into ``hash_ids``, so
prompts that share a prefix share cached blocks on the simulator.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import MAX_LINE_BYTES, parse_document
from schedkit.workload.model import TraceRequest, Workload
from schedkit.workload.source import RowError, TraceSource, json_row, trace_lines

__all__ = [
    "TEXT_COLUMNS", "csv_rows", "is_text_row", "jsonl_rows", "load_tokenizer", "sharegpt_rows",
    "starts_list", "text_workload",
]  # fmt: skip

Row = tuple[str, Mapping[str, Any]]  # where (line, row, conversation), the row

TEXT_COLUMNS = (
    "prompt", "instruction", "question", "input", "context", "content", "conversation", "turn",
    "text",
)  # fmt: skip
PREFIX_COLUMNS = ("system_prompt", "system", "prefix")
PROMPT_COUNT_COLUMNS = ("prompt_tokens_count", "input_tokens_count")
OUTPUT_COUNT_COLUMNS = ("output_tokens", "output_tokens_count", "completion_tokens_count")
DEFAULT_OUTPUT_TOKENS = 256  # vllm bench serve --custom-output-len
HASH_BLOCK_TOKENS = 16
SHAREGPT_LIMITS = (4, 1024, 2048)  # vLLM's is_valid_sequence: min, max prompt, max total
ARRIVAL_RATE = 1.0  # requests/s before --request-rate

Encode = Callable[[list[str]], list[list[int]]]


def is_text_row(row: Mapping[str, Any]) -> bool:
    """Whether a JSONL object or CSV header is a request with prompt text, not a trace row."""
    return any(c in row for c in TEXT_COLUMNS) and not row.keys() & {"arrival_s", "timestamp"}


def load_tokenizer(name: str) -> Encode:
    """A batch encoder for tokenizer ``name``: transformers' ``AutoTokenizer`` when it is
    installed, else ``tokenizers`` (a directory with ``tokenizer.json``, the file, or a
    Hugging Face name)."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        pass
    else:
        try:
            tok = AutoTokenizer.from_pretrained(name)
        except Exception as exc:  # OSError, a hub error, a bad config
            raise _tokenizer_error(name, exc) from None
        return lambda texts: [list(ids) for ids in tok(texts)["input_ids"]]
    try:
        import tokenizers  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SchedkitError(
            f"--tokenizer {quote(name)} needs transformers or tokenizers: pip install"
            " 'schedkit[text]'"
        ) from None
    path = Path(name).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        fast = (
            tokenizers.Tokenizer.from_file(str(file))
            if file.is_file()
            else tokenizers.Tokenizer.from_pretrained(name)
        )
    except Exception as exc:
        raise _tokenizer_error(name, exc) from None
    return lambda texts: [e.ids for e in fast.encode_batch(texts)]


def _tokenizer_error(name: str, exc: BaseException) -> SchedkitError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SchedkitError(
        f"cannot load tokenizer {quote(name)} ({first}); pass a Hugging Face model name"
        " reachable from here, a local directory with tokenizer.json, or the file itself"
    )


# -- reading the files --------------------------------------------------------------------


def jsonl_rows(trace: TraceSource) -> Iterator[Row] | None:
    """The rows of a JSONL request file with prompt text (vllm bench's custom dataset,
    guidellm's), or None when its first object is not one (the trace parser judges it)."""

    def objects() -> Iterator[Row]:
        for lineno, line in enumerate(trace_lines(trace), start=1):
            if line.strip():
                try:
                    yield f"line {lineno:,}", json_row(line)
                except RowError as exc:
                    raise SchedkitError(f"{trace.origin}: line {lineno:,}: {exc}") from None

    try:
        first = next(objects(), None)
    except SchedkitError:
        return None
    return objects() if first is not None and is_text_row(first[1]) else None


def csv_rows(trace: TraceSource) -> Iterator[Row] | None:
    """The rows of a CSV request file whose header names a prompt text column (guidellm's
    data files), or None."""
    field_limit = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        header = next(csv.reader(trace_lines(trace)), [])
    except csv.Error:
        return None
    finally:
        csv.field_size_limit(field_limit)
    if not is_text_row(dict.fromkeys(cell.strip() for cell in header)):
        return None

    def rows() -> Iterator[Row]:
        limit = csv.field_size_limit(MAX_LINE_BYTES)
        try:
            for i, row in enumerate(csv.DictReader(trace_lines(trace)), start=1):
                yield f"row {i:,}", row
        except csv.Error as exc:
            raise SchedkitError(f"{trace.origin}: not valid CSV ({exc})") from None
        finally:
            csv.field_size_limit(limit)

    return rows()


def starts_list(path: Path) -> bool:
    """Whether a ``.json`` file is a JSON list (ShareGPT's), not a workload spec object."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def sharegpt_rows(path: Path) -> list[Row]:
    """ShareGPT's JSON list as rows: an entry with two or more ``conversations`` turns (the
    others are left out, as vLLM leaves them), its first turn the prompt, the second the
    completion whose length is the output. The file is read whole, as vLLM reads it."""
    origin = str(path)
    try:
        data = parse_document(path.read_text(encoding="utf-8-sig"), "json")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchedkitError(f"cannot read workload file {origin} (UTF-8 JSON): {exc}") from None
    except json.JSONDecodeError as exc:
        raise SchedkitError(f"{origin}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:  # NestingError, or an integer of over 4,300 digits
        raise SchedkitError(f"{origin}: not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise SchedkitError(f"{origin}: expected ShareGPT's list of conversations")
    rows: list[Row] = []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        try:
            prompt, completion = turns[0]["value"], turns[1]["value"]
        except (TypeError, KeyError):
            raise SchedkitError(
                f"{origin}: conversation {i:,}: a turn must be an object with a text 'value'"
            ) from None
        rows.append((f"conversation {i:,}", {"prompt": prompt, "completion": completion}))
    return rows


# -- the workload ---------------------------------------------------------------------------


def text_workload(
    rows: Iterable[Row],
    name: str,
    origin: str,
    fmt: str,  # "JSONL", "CSV", "ShareGPT"
    tokenizer: str | None,
    seed: int,
    max_rows: int | None,
) -> Workload:
    """The workload of request rows (``where``, row); ShareGPT's first ``max_rows`` within
    vLLM's limits, the others' first ``max_rows`` (no further row is read)."""
    sharegpt = fmt == "ShareGPT"
    taken = _first(rows, None if sharegpt else max_rows)
    prompts, given, outputs = [], [], []
    for where, row in taken:
        text, count, output = _fields(row, where, origin)
        prompts.append(text)
        given.append(count)
        outputs.append(output)
    if not prompts:
        raise SchedkitError(f"{origin}: no requests with prompt text")
    encode = _encoder(tokenizer, taken, given, sharegpt, origin)
    ids = encode(prompts) if encode is not None else [None] * len(prompts)
    if sharegpt:
        assert encode is not None
        completions = encode([str(row["completion"]) for _, row in taken])
        outputs = [len(c) for c in completions]
    kept, skipped = _kept(ids, given, outputs, sharegpt, max_rows)
    if not kept:
        raise SchedkitError(f"{origin}: no request within vLLM's ShareGPT length limits")
    notes = [f"{fmt} request file {origin}", "Poisson arrivals at 1 request/s"]
    if tokenizer is not None:
        notes.append(f"tokenizer {tokenizer}")
    if skipped:
        notes.append(f"{skipped:,} conversations outside vLLM's length limits skipped")
    requests = _poisson_requests(name, kept, seed)
    return Workload(name, requests, HASH_BLOCK_TOKENS if encode else 0, "; ".join(notes))


def _first(rows: Iterable[Row], max_rows: int | None) -> list[Row]:
    """The first ``max_rows`` rows (all when ``None``)."""
    taken: list[Row] = []
    for item in rows:
        if max_rows is not None and len(taken) >= max_rows:
            break
        taken.append(item)
    return taken


def _encoder(
    tokenizer: str | None,
    taken: Sequence[Row],
    given: Sequence[int | None],
    sharegpt: bool,
    origin: str,
) -> Encode | None:
    """The tokenizer's encoder, or None when every row gives its prompt's token count;
    a :class:`SchedkitError` naming the first row that needs a tokenizer none was given."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if sharegpt or None in given:
        where = taken[given.index(None)][0] if None in given else taken[0][0]
        raise SchedkitError(
            f"{origin}: {where} has prompt text and no token counts; counting them needs the"
            " model's tokenizer: pass --tokenizer NAME_OR_DIR (or give each row"
            " prompt_tokens_count and output_tokens_count)"
        )
    return None


def _kept(
    ids: Sequence[list[int] | None],
    given: Sequence[int | None],
    outputs: Sequence[int | None],
    sharegpt: bool,
    max_rows: int | None,
) -> tuple[list[tuple[int, int, tuple[int, ...]]], int]:
    """The first ``max_rows`` requests as (prompt tokens, output tokens, hash ids), ShareGPT's
    within vLLM's limits, and how many ShareGPT conversations were outside them."""
    kept: list[tuple[int, int, tuple[int, ...]]] = []
    blocks: dict[int, int] = {}
    skipped = 0
    for token_ids, count, output in zip(ids, given, outputs, strict=True):
        prompt_len = len(token_ids) if token_ids is not None else count
        assert prompt_len is not None and output is not None
        if sharegpt and not _valid_sharegpt(prompt_len, output):
            skipped += 1
            continue
        kept.append((prompt_len, output, _hash_ids(token_ids, blocks) if token_ids else ()))
        if max_rows is not None and len(kept) >= max_rows:
            break
    return kept, skipped


def _poisson_requests(
    name: str, kept: Sequence[tuple[int, int, tuple[int, ...]]], seed: int
) -> tuple[TraceRequest, ...]:
    """``kept`` in order on Poisson arrivals at ``ARRIVAL_RATE``, drawn from ``seed``."""
    gaps = np.random.default_rng(seed).exponential(1 / ARRIVAL_RATE, len(kept))
    arrivals = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return tuple(
        TraceRequest(f"{name}-{i:06d}", float(t), p, o, hash_ids=h)
        for i, (t, (p, o, h)) in enumerate(zip(arrivals, kept, strict=True))
    )


def _fields(row: Mapping[str, Any], where: str, origin: str) -> tuple[str, int | None, int | None]:
    """A row's prompt text (its prefix first), given prompt token count, output tokens."""
    column = next((c for c in TEXT_COLUMNS if c in row), None)
    if column is None or not isinstance(row[column], str):
        raise SchedkitError(
            f"{origin}: {where}: expected prompt text in one of {', '.join(TEXT_COLUMNS)},"
            f" got {quote(dict(row)) if column is None else quote(row[column])}"
        )
    prefix = next((row[c] for c in PREFIX_COLUMNS if isinstance(row.get(c), str)), "")
    count = _count(row, PROMPT_COUNT_COLUMNS, where, origin)
    output = _count(row, OUTPUT_COUNT_COLUMNS, where, origin)
    return prefix + row[column], count, DEFAULT_OUTPUT_TOKENS if output is None else output


def _count(row: Mapping[str, Any], columns: tuple[str, ...], where: str, origin: str) -> int | None:
    for c in columns:
        value = row.get(c)
        if value is None or value == "":
            continue
        try:
            count = int(value)  # CSV cells are text
        except (TypeError, ValueError):
            count = -1
        if count < 0 or isinstance(value, bool) or (isinstance(value, float) and value != count):
            raise SchedkitError(
                f"{origin}: {where}: {c} must be a non-negative integer, got {quote(value)}"
            )
        return count
    return None


def _valid_sharegpt(prompt_len: int, output_len: int) -> bool:
    low, max_prompt, max_total = SHAREGPT_LIMITS
    return (
        low <= prompt_len <= max_prompt
        and output_len >= low
        and prompt_len + output_len <= max_total
    )


def _hash_ids(token_ids: list[int], blocks: dict[int, int]) -> tuple[int, ...]:
    """One id per full 16-token block, chained as vLLM's block hashes are (a block's id
    names its tokens and every token before it), numbered in order of first use."""
    out, prev = [], 0
    for start in range(0, len(token_ids) - HASH_BLOCK_TOKENS + 1, HASH_BLOCK_TOKENS):
        prev = hash((prev, *token_ids[start : start + HASH_BLOCK_TOKENS]))
        out.append(blocks.setdefault(prev, len(blocks)))
    return tuple(out)
