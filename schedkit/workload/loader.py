"""Loading workloads: the real traces schedkit ships, trace files, synthetic streams.

``load_workload(spec, seed=0)`` accepts a bundled name from ``KNOWN_WORKLOADS`` (real traces
``azure-conv``, ``azure-code``, ``mooncake-conv``, licences in ``schedkit/data/TRACES-LICENSES.md``;
example specs ``two-tenant-flood``, ``two-class``; the mix ``online-offline``, interactive chat
with a batch backlog, :mod:`schedkit.workload.mix`); a trace file, ``.csv``/``.csv.gz`` in the Azure
format (header ``TIMESTAMP,ContextTokens,GeneratedTokens``, 2023's times or 2024's with a UTC
offset, other columns ignored, quoted cells as CSV quotes them) or BurstGPT's (header
``Timestamp,Model,Request tokens,Response tokens,...``, :mod:`schedkit.workload.formats.burstgpt`), told apart
by the header, or ``.jsonl``/``.jsonl.gz`` in the Mooncake format (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``) or schedkit's
own, told apart by the keys of the first object; a request file with prompt text (vllm bench's
ShareGPT ``.json`` and custom ``.jsonl``, guidellm's ``.jsonl``/``.csv``: :mod:`schedkit.workload.formats.
prompt_text`, counted with ``tokenizer``); or a synthetic stream (``poisson:...``,
``gamma:...``) or ``.toml``/``.json`` multi-tenant spec, both described in
:mod:`schedkit.workload.synthetic`. ``seed`` is added to a spec's own seed; traces ignore it.

schedkit JSONL has one object a line with :class:`TraceRequest` field names (``arrival_s``,
``prompt_tokens``, ``output_tokens`` required; ``request_id`` defaults to ``<file stem>-<index>``)
and an optional first line naming the workload and the block size of ``hash_ids``::

    {"workload": {"name": "my-trace", "source": "...", "hash_block_tokens": 512}}
    {"arrival_s": 0.0, "prompt_tokens": 900, "output_tokens": 64, "hash_ids": [0, 1]}
    {"arrival_s": 0.4, "prompt_tokens": 120, "output_tokens": 16, "tenant": "batch", "priority": 1}

Azure and Mooncake arrivals are offsets from the earliest row; the parsers are in
:mod:`schedkit.workload.formats` (one module per format), which stream a file and,
given ``max_requests``, stop at that row. Parsed workloads are cached per process (a bench loading one workload per arm parses it
once); they are immutable, so shareable.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import zlib
from collections.abc import Iterator
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Literal

from schedkit.errors import SchedkitError, did_you_mean, quote
from schedkit.inputs import MAX_DOCUMENT_BYTES, decode_text
from schedkit.workload import mix, synthetic
from schedkit.workload.formats import azure, burstgpt, jsonl, prompt_text
from schedkit.workload.model import Workload
from schedkit.workload.source import Readable, TraceSource

__all__ = ["KNOWN_WORKLOADS", "load_workload"]


# --- bundled workloads -------------------------------------------------------------------------

_AZURE_SOURCE = (
    "Azure LLM inference trace 2023, {service} service (Patel et al., Splitwise, ISCA 2024;"
    " github.com/Azure/AzurePublicDataset; CC-BY 4.0)"
)
_MOONCAKE_SOURCE = (
    "Mooncake FAST'25 conversation trace (Qin et al., Mooncake, FAST 2025;"
    " github.com/kvcache-ai/Mooncake; Apache-2.0)"
)
# name -> (file in schedkit/data, source line; "" lets the spec file name its own source)
_BUNDLED: dict[str, tuple[str, str]] = {
    "azure-conv": ("azure-2023-conv.csv.gz", _AZURE_SOURCE.format(service="conversation")),
    "azure-code": ("azure-2023-code.csv.gz", _AZURE_SOURCE.format(service="code")),
    "mooncake-conv": ("mooncake-fast25-conversation.jsonl.gz", _MOONCAKE_SOURCE),
    "two-tenant-flood": ("two-tenant-flood.toml", ""),
    "two-class": ("two-class.toml", ""),
    "online-offline": ("online-offline.toml", ""),
}
KNOWN_WORKLOADS: tuple[str, ...] = tuple(_BUNDLED)

_SPEC_SUFFIXES = (".toml", ".json")
_SUFFIXES = (".csv", ".csv.gz", ".jsonl", ".jsonl.gz", *_SPEC_SUFFIXES)

_SYNTAX_HELP = (
    "a trace file path ending in .csv/.csv.gz (Azure or BurstGPT format) or .jsonl/.jsonl.gz (Mooncake or"
    " schedkit JSONL); a workload-spec file ending in .toml/.json; or a synthetic stream such as"
    " 'poisson:rate=5,n=1000[,prompt=1024,output=128,seed=0]' or 'gamma:rate=5,cv=4,n=1000[,...]'"
)


def _read_spec(path: Path | None, filename: str) -> str:
    """A workload spec's text (gunzipped if ``.gz``), read whole up to ``MAX_DOCUMENT_BYTES``;
    ``path=None`` reads ``schedkit/data/<filename>``. Fails with a message, not a traceback."""
    where = str(path) if path is not None else f"bundled file {filename}"
    expected = "a TOML or JSON workload spec"
    source = path if path is not None else resources.files("schedkit") / "data" / filename
    try:
        with source.open("rb") as raw:
            stream = gzip.GzipFile(fileobj=raw) if filename.lower().endswith(".gz") else raw
            data = stream.read(MAX_DOCUMENT_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise SchedkitError(f"cannot read workload file {where} (gzip, UTF-8 text): {exc}") from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise SchedkitError(
            f"workload spec {where} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB;"
            f" pass {expected} (a few KiB)"
        )
    return decode_text(data, f"workload file {where}", expected)


@contextlib.contextmanager
def _open_trace(source: Path | Traversable, gzipped: bool) -> Iterator[Readable]:
    with source.open("rb") as raw:
        yield gzip.GzipFile(fileobj=raw) if gzipped else raw


def _trace_source(path: Path | None, filename: str) -> TraceSource:
    """A trace file, streamed by :mod:`schedkit.workload.source` (a line
    at a time, each at most ``MAX_LINE_BYTES``)."""
    where = str(path) if path is not None else f"bundled file {filename}"
    source = path if path is not None else resources.files("schedkit") / "data" / filename
    opener = functools.partial(_open_trace, source, filename.lower().endswith(".gz"))
    return TraceSource(where, opener, path.stat().st_size if path is not None else 0)


def _load(
    path: Path | None, filename: str, name: str, source: str, seed: int, max_requests: int | None,
    tokenizer: str | None = None,
) -> Workload:  # fmt: skip
    """Parse a workload file (``path=None``: ``schedkit/data/<filename>``) by its suffix."""
    lowered = filename.lower()
    if path is not None and lowered.endswith(".json") and prompt_text.starts_list(path):
        sharegpt = prompt_text.sharegpt_rows(path)
        return prompt_text.text_workload(
            sharegpt, name, str(path), "ShareGPT", tokenizer, seed, max_requests
        )
    if lowered.endswith(_SPEC_SUFFIXES):
        text = _read_spec(path, filename)
        fmt: Literal["toml", "json"] = "json" if lowered.endswith(".json") else "toml"
        where = str(path) if path is not None else f"bundled file {filename}"
        if mix.is_mix(text, fmt):
            base = path.parent if path is not None else None
            workload = mix.mix_workload(
                text, origin=where, fmt=fmt, seed=seed, base=base, load=load_workload
            )
        else:
            workload = synthetic.spec_workload(text, origin=where, fmt=fmt, seed=seed)
        return workload if max_requests is None else workload.truncated(max_requests)
    trace = _trace_source(path, filename)
    if lowered.endswith((".csv", ".csv.gz")):
        if burstgpt.is_burstgpt_header(trace):
            return burstgpt.parse_burstgpt_csv(trace, name, max_requests)
        if (rows := prompt_text.csv_rows(trace)) is not None:
            return prompt_text.text_workload(
                rows, name, trace.origin, "CSV", tokenizer, seed, max_requests
            )
        requests = tuple(azure.parse_azure_csv(trace, name, max_requests))
        return Workload(name, requests, 0, source or f"Azure-format trace {trace.origin}")
    if (rows := prompt_text.jsonl_rows(trace)) is not None:
        return prompt_text.text_workload(
            rows, name, trace.origin, "JSONL", tokenizer, seed, max_requests
        )
    return jsonl.parse_jsonl(trace, name, source, max_requests)


@functools.lru_cache(maxsize=16)
def _load_bundled(name: str, seed: int, max_requests: int | None) -> Workload:
    filename, source = _BUNDLED[name]
    return _load(None, filename, name, source, seed, max_requests)


@functools.lru_cache(maxsize=16)
def _load_file(
    path_str: str, _mtime_ns: int, _size: int, seed: int, max_requests: int | None,
    tokenizer: str | None = None,
) -> Workload:  # fmt: skip
    # mtime and size are in the cache key so that an edited file is parsed again.
    path = Path(path_str)
    lowered = path.name.lower()
    stem = next((path.name[: -len(s)] for s in _SUFFIXES if lowered.endswith(s)), path.stem)
    return _load(path, path.name, stem or path.name, "", seed, max_requests, tokenizer)


# --- entry point -------------------------------------------------------------------------------


def load_workload(
    spec: str, *, seed: int = 0, max_requests: int | None = None, tokenizer: str | None = None
) -> Workload:
    """Load a workload by bundled name, file path, or synthetic spec (see the module docstring).

    ``max_requests`` keeps only the first requests, as :meth:`Workload.truncated` does; a
    trace file is then read no further than its ``max_requests``-th row, so the time and
    memory it takes do not grow with the file. Those rows are the first arrivals when the
    file is in arrival order, as published traces are; arrivals are offsets from the
    earliest row read.

    Raises :class:`~schedkit.errors.SchedkitError` naming the file, line and problem when the
    input is malformed, and listing the accepted syntaxes when ``spec`` is not recognised.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SchedkitError(
            f"workload spec must be a non-empty string, got {quote(spec)}; use a bundled name"
            f" ({', '.join(KNOWN_WORKLOADS)}), {_SYNTAX_HELP}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SchedkitError(f"seed must be an integer, got {quote(seed)}")
    if max_requests is not None and (
        isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1
    ):
        raise SchedkitError(
            f"max_requests must be a positive integer (how many requests to keep from the"
            f" start of the workload) or None, got {quote(max_requests)}"
        )
    text = spec.strip()
    if text in _BUNDLED:
        # Traces ignore the seed; keying them on 0 keeps one cached copy.
        spec_seed = seed if _BUNDLED[text][0].endswith(_SPEC_SUFFIXES) else 0
        return _load_bundled(text, spec_seed, max_requests)
    kind, colon, _ = text.partition(":")
    if colon and kind.strip().lower() in ("poisson", "gamma"):
        workload = synthetic.inline_workload(text, seed)
        return workload if max_requests is None else workload.truncated(max_requests)
    if text.lower().endswith(_SUFFIXES):
        path = Path(text).expanduser()
        try:
            stat = path.stat()
        except OSError:
            raise SchedkitError(
                f"workload file {quote(str(path))} does not exist (or cannot be read); check the"
                " path, or use one of the bundled workloads: " + ", ".join(KNOWN_WORKLOADS)
            ) from None
        spec_seed = seed if text.lower().endswith(_SPEC_SUFFIXES) else 0  # traces ignore it
        return _load_file(
            str(path.resolve()), stat.st_mtime_ns, stat.st_size, spec_seed, max_requests,
            tokenizer,
        )  # fmt: skip
    raise SchedkitError(
        f"unknown workload {quote(text)}{_close_match(text)}. Known workloads:"
        f" {', '.join(KNOWN_WORKLOADS)}. Also accepted: {_SYNTAX_HELP}"
    )


def _close_match(text: str) -> str:
    """`` (did you mean ...?)`` for a misspelt bundled name, or for the kind of a synthetic
    stream (``poison:rate=5``: ``'poisson'``)."""
    kind, colon, _ = text.partition(":")
    if colon:
        return did_you_mean(kind, ("poisson", "gamma"))
    return did_you_mean(text, KNOWN_WORKLOADS)
