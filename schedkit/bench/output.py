"""What a bench run writes: results.json, the per-request table and the reports.

Everything is rendered into a hidden temporary directory inside ``--out`` first and
moved into place only when all of it was written, so a run that fails (a bad policy, an
engine crash, a full disk) leaves the previous results untouched and never half of new
ones. ``check_out_dir`` makes sure ``--out`` can take them before any arm runs, and
``check_replacing`` that it holds no other run's results (a bench's ``results.json``, a
sweep's ``sweep.json`` or ``points.jsonl``, a plan's ``plan.json``) unless ``--overwrite``
was given. The layout of every file is documented in ``docs/results.md``.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.bench.results import Results
from schedkit.bench.stats.metrics import LATENCIES
from schedkit.bench.stats.request_table import RequestTable, nullable
from schedkit.errors import SchedkitError, quote
from schedkit.records import RequestRecord, RunResult

#: Columns of requests.parquet / requests.csv, one row per request per arm.
REQUEST_COLUMNS: tuple[str, ...] = (
    "arm",
    "request_id",
    "tenant",
    "priority",
    "arrival_s",
    "prompt_tokens",
    "max_tokens",
    "output_tokens",
    "outcome",
    "reject_reason",
    "queue_ms",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "preemptions",
    "recomputed_tokens",
    "cached_tokens",
    "met_slo",
)


def _git_revision() -> str | None:
    """The commit of the schedkit checkout this code runs from (``+dirty`` when it has
    uncommitted changes); None when schedkit was installed from a package."""
    here = Path(__file__).resolve().parent
    try:
        top = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.split()
        if len(top) != 2 or not (Path(top[0]) / "schedkit" / "__init__.py").is_file():
            return None
        dirty = subprocess.run(
            ["git", "-C", top[0], "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return top[1] + ("+dirty" if dirty else "")


def _program() -> str:
    """The command's name as typed: ``schedkit``, also for ``python -m schedkit``."""
    name = Path(sys.argv[0]).name
    return "schedkit" if name == "__main__.py" else name


def provenance(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Where a result came from: versions, revision, command line and the bench spec."""
    try:
        version = metadata.version("schedkit")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare tree
        version = None
    return {
        "schedkit_version": version,
        "git_revision": _git_revision(),
        "command": [_program(), *sys.argv[1:]] if sys.argv else [],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(terse=True),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "spec": dict(spec),
    }


def _record_columns(records: Sequence[RequestRecord]) -> dict[str, list[Any]]:
    """The per-request table's columns taken as they are from the records (one attribute a
    comprehension: several times faster than ``getattr`` by name)."""
    return {
        "request_id": [r.request_id for r in records],
        "tenant": [r.tenant for r in records],
        "priority": [r.priority for r in records],
        "arrival_s": [r.arrival_s for r in records],
        "prompt_tokens": [r.prompt_tokens for r in records],
        "max_tokens": [r.max_tokens for r in records],
        "output_tokens": [r.output_tokens for r in records],
        "reject_reason": [r.reject_reason for r in records],
        "preemptions": [r.preemptions for r in records],
        "recomputed_tokens": [r.recomputed_tokens for r in records],
        "cached_tokens": [r.cached_tokens for r in records],
    }


def request_rows(
    runs: Sequence[RunResult],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    tables: Sequence[RequestTable] | None = None,
) -> dict[str, list[Any]]:
    """The per-request table as columns (:data:`REQUEST_COLUMNS`); latencies in ms, None
    where undefined; ``met_slo`` None when no target applies. ``tables``: the arms'
    :class:`RequestTable`, when built already."""
    table: dict[str, list[Any]] = {column: [] for column in REQUEST_COLUMNS}
    for index, run in enumerate(runs):
        n = len(run.records)
        if not n:
            continue
        t = tables[index] if tables is not None else RequestTable.of(run)
        columns: dict[str, Sequence[Any]] = {
            "arm": [run.policy] * n,
            **_record_columns(run.records),
            "outcome": [reason or "unfinished" for reason in t.finish_reasons],
            **{key: nullable(t.latency(key)) for key in LATENCIES},
            "met_slo": t.met_slo(slo_ttft_ms, slo_tpot_ms).tolist()
            if t.slo_applies(slo_ttft_ms, slo_tpot_ms)
            else [None] * n,
        }
        for column in REQUEST_COLUMNS:
            table[column].extend(columns[column])
    return table


def write_requests(directory: Path, table: Mapping[str, list[Any]]) -> Path:
    """``requests.parquet`` with pyarrow, else ``requests.csv`` (empty cells for None)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        path = directory / "requests.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(REQUEST_COLUMNS)
            columns = [table[c] for c in REQUEST_COLUMNS]
            for row in zip(*columns, strict=True):
                writer.writerow(["" if v is None else v for v in row])
        return path
    path = directory / "requests.parquet"
    pq.write_table(pa.table({c: table[c] for c in REQUEST_COLUMNS}), path)
    return path


def check_out_dir(out_dir: Path) -> None:
    """Fail before any arm runs when results could not be written to ``out_dir``.

    ``out_dir`` must be a directory, or not exist under a directory, that this process can
    create files in; that is probed with a temporary file, removed at once. Nothing is
    created otherwise: a run that fails later leaves no empty ``--out`` behind.
    """
    where = quote(str(out_dir))
    try:
        is_file = out_dir.exists() and not out_dir.is_dir()
        parent = out_dir
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    except OSError as exc:  # a name too long, a loop of links
        raise SchedkitError(
            f"--out {where} is not a usable path ({exc.strerror or exc}); pass a directory"
        ) from None
    if is_file:
        raise SchedkitError(
            f"--out {where} is an existing file, not a directory; pass a directory for"
            " results.json and the reports (it is created if missing), or move the file away"
        )
    if not parent.is_dir():
        raise SchedkitError(
            f"--out {where} cannot be created: {quote(str(parent))} is a file, not a"
            " directory; pass a path whose parents are directories"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".schedkit-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SchedkitError(
            f"--out {where} is not writable ({exc.strerror or exc} creating a file in"
            f" {quote(str(parent))}); pass a directory you can write to, or fix its"
            " permissions"
        ) from None


#: The files each command writes in its ``--out``; the first names its results (what
#: ``check_replacing`` looks for), the others are read from them. A bench also writes
#: ``vllm-bench-*.json``, one per arm.
RUN_FILES: dict[str, tuple[str, ...]] = {
    "bench": ("results.json", "report.md", "report.html", "requests.parquet", "requests.csv"),
    "sweep": ("sweep.json", "points.jsonl", "sweep.md", "sweep.html"),
    "plan": ("plan.json", "plan.md", "plan.html"),
}
#: A file that means another run's results are in a folder, and whose they are.
RESULT_FILES = {"results.json": "a bench", "sweep.json": "a sweep", "points.jsonl": "a sweep",
                "plan.json": "a plan"}  # fmt: skip


def earlier_results(out_dir: Path, ignore: frozenset[str] = frozenset()) -> str | None:
    """What another run left in ``out_dir``, for a message: the file, whose, when it was
    written and (when recorded) its command; None when there is none (``ignore``: files
    that may stay, such as a sweep's own points)."""
    found = [n for n in RESULT_FILES if n not in ignore and (out_dir / n).is_file()]
    if not found:
        return None
    name = found[0]
    others = ", ".join(found[1:])
    text = f"{RESULT_FILES[name]}'s results ({name}, {written(out_dir / name)})"
    return text + (f", and {others}" if others else "")


def written(path: Path) -> str:
    """``written 2026-12-06 10:31 UTC by `schedkit bench ...```: when ``path`` was
    written (its provenance, else the file's time) and the command its provenance
    records, if any."""
    when, command = _written(path)
    if len(command) > 200:
        command = command[:200] + "..."
    return f"written {when}" + (f" by `{command}`" if command else "")


def _written(path: Path) -> tuple[str, str]:
    created, command = None, ""
    if path.suffix == ".json" and path.stat().st_size < 50_000_000:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            prov = data.get("provenance") if isinstance(data, dict) else None
            if isinstance(prov, dict):
                created = datetime.fromisoformat(str(prov["created_utc"]))
                command = shlex.join(str(part) for part in prov.get("command") or [])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if created is None:
        created = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return created.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"), command


def check_replacing(
    out_dir: Path, overwrite: bool, *, ignore: frozenset[str] = frozenset()
) -> None:
    """Refuse to write over another run's results in ``out_dir`` (exit status 2, nothing
    written), naming them and the fix; ``overwrite`` lets the run replace them."""
    if overwrite:
        return
    try:
        found = earlier_results(out_dir, ignore) if out_dir.is_dir() else None
    except OSError:
        return  # unreadable: check_out_dir says so
    if found is not None:
        raise SchedkitError(
            f"--out {quote(str(out_dir))} holds {found}; pass --overwrite to replace"
            " them, or another --out for this run"
        )


def remove_other_runs(out_dir: Path, kind: str) -> None:
    """With ``--overwrite``: remove what runs of other commands left in ``out_dir``, so
    the folder holds one run's results (``kind``'s own files are replaced as written)."""
    for other, names in RUN_FILES.items():
        if other != kind:
            for name in names:
                (out_dir / name).unlink(missing_ok=True)
    if kind != "bench":
        for path in out_dir.glob("vllm-bench-*.json"):
            path.unlink(missing_ok=True)


def write_outputs(
    out_dir: Path,
    results: Results,
    runs: list[RunResult],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    replace: bool = False,
    tables: Sequence[RequestTable] | None = None,
) -> list[Path]:
    """Write results.json, the per-request table and the reports into ``out_dir``, all or
    nothing; return the paths written. ``replace`` (``--overwrite``): also remove what
    other commands' runs left there. ``tables``: the arms' :class:`RequestTable`, when
    built already (each request's latencies are computed once, for every file)."""
    from schedkit.bench.report.render import write_report
    from schedkit.bench.report.vllm_format import write_vllm_bench

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".schedkit-", dir=out_dir))
    except OSError as exc:
        raise SchedkitError(
            f"cannot write the results to --out {quote(str(out_dir))}: {exc.strerror or exc};"
            " pass a directory you can write to"
        ) from None
    slos = {"slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms}
    try:
        (staging / "results.json").write_text(
            json.dumps(results.to_json(), indent=2, default=str), encoding="utf-8"
        )
        tables = list(tables) if tables is not None else [RequestTable.of(r) for r in runs]
        write_requests(staging, request_rows(runs, **slos, tables=tables))
        write_report(staging, results, runs, tables)
        write_vllm_bench(staging, results, runs, **slos, tables=tables)
        written = []
        stale = {"requests.csv", "requests.parquet"}  # one of them is from an older run
        stale.update(p.name for p in out_dir.glob("vllm-bench-*.json"))  # an older run's arms
        for name in stale:
            if not (staging / name).exists():
                (out_dir / name).unlink(missing_ok=True)
        if replace:
            remove_other_runs(out_dir, "bench")
        for path in sorted(staging.iterdir()):
            os.replace(path, out_dir / path.name)
            written.append(out_dir / path.name)
        return written
    except OSError as exc:  # a full disk, a quota: say so rather than print a traceback
        raise SchedkitError(
            f"cannot write the results to --out {quote(str(out_dir))}: {exc.strerror or exc}"
            f" ({quote(exc.filename) if exc.filename else 'a file'}); free space or pass"
            " another directory. Earlier results there are untouched"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
