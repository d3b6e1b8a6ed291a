"""Running a sweep: probe points in parallel processes, kept as they finish, resumable.

Every finished probe point is appended to ``points.jsonl`` in the output directory
(its first line names the sweep). A sweep interrupted (Ctrl-C, a worker lost) keeps
those and says which are missing; the same command run again skips them.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from schedkit.bench.output import (
    check_out_dir,
    check_replacing,
    provenance,
    remove_other_runs,
    written,
)
from schedkit.bench.progress import tracking
from schedkit.bench.sweep.spec import Point, Sweep, SweepSpec, aggregate
from schedkit.bench.workers import fork_pool
from schedkit.errors import SchedkitError, quote

__all__ = ["INTERRUPTED_EXIT", "STOPPED_EXIT", "SweepInterrupted", "run_sweep"]

POINTS_FILE = "points.jsonl"
INTERRUPTED_EXIT = 130
STOPPED_EXIT = 5
Progress = Callable[[int, int, int, int], None]  # points done, points, arms done, arms


class SweepInterrupted(SchedkitError):
    """The sweep stopped before every probe point ran; the finished ones are kept.
    ``exit_code``: 130 when interrupted (as a shell reports Ctrl-C), 5 when a worker
    was lost."""

    def __init__(self, message: str, *, interrupted: bool) -> None:
        super().__init__(message)
        self.exit_code = INTERRUPTED_EXIT if interrupted else STOPPED_EXIT


def _load_done(path: Path, fingerprint: str) -> dict[str, dict[str, Any]] | None:
    """The probe points kept in ``path`` by this sweep; None when they are another
    sweep's."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if header.get("sweep") != fingerprint:
        return None
    done = {}
    for line in lines[1:]:
        try:
            point = json.loads(line)
        except ValueError:  # the line being written when the sweep stopped
            continue
        done[point["key"]] = point
    return done


def _claim(out_dir: Path, fingerprint: str, overwrite: bool) -> dict[str, dict[str, Any]]:
    """The probe points this sweep already kept in ``out_dir`` (run again, it skips them).
    Another run's results there are refused, or with ``overwrite`` removed."""
    path = out_dir / POINTS_FILE
    done = _load_done(path, fingerprint)
    if done is None and not overwrite:
        kept = max(0, len(path.read_text(encoding="utf-8").splitlines()) - 1)
        raise SchedkitError(
            f"--out {quote(str(out_dir))} holds the probe points of another sweep ({kept:,}"
            f" kept in {POINTS_FILE}, {written(path)}: other arms, rates, replicates or"
            " settings); pass --overwrite to start this sweep over there, or another --out"
        )
    ignore = frozenset({POINTS_FILE, "sweep.json"} if done else {POINTS_FILE})
    check_replacing(out_dir, overwrite, ignore=ignore)
    if overwrite and out_dir.is_dir():
        if done is None:
            path.unlink()
        remove_other_runs(out_dir, "sweep")
    return done or {}


_FORKED: Sweep | None = None  # the sweep a forked worker inherited


def _run_forked(keys: list[str]) -> list[dict[str, Any]]:
    assert _FORKED is not None
    points = {p.key: p for p in _FORKED.points}
    return [_FORKED.run(points[k]) for k in keys]


def run_sweep(
    spec: SweepSpec, out_dir: Path, progress: Progress | None = None, *, overwrite: bool = False
) -> dict[str, Any]:
    """Run every probe point not already in ``out_dir``; write sweep.json and the
    reports. Raises :class:`SweepInterrupted` (after saving) when stopped early. Another
    run's results in ``out_dir`` are refused, unless ``overwrite``; this sweep's own
    points are kept and skipped."""
    check_out_dir(out_dir)
    sweep = Sweep(spec)
    done = _claim(out_dir, spec.fingerprint(), overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / POINTS_FILE
    if not path.exists():
        path.write_text(json.dumps({"sweep": spec.fingerprint()}) + "\n", encoding="utf-8")
    todo = [p for p in sweep.points if p.key not in done]
    total = len(sweep.points)
    per_arm = total // len(sweep.bench.arms)
    left = {a: per_arm for a in range(len(sweep.bench.arms))}  # points each arm still runs
    for key in done:
        left[int(key.split("/", 1)[0])] -= 1

    def report() -> None:
        if progress:
            arms_done = sum(n == 0 for n in left.values())
            progress(len(done), total, arms_done, len(left))

    report()
    intro = _intro(spec, len(left), total, len(done))
    try:
        with (
            path.open("a", encoding="utf-8") as sink,
            tracking(
                "sweep", total, "probe points", intro=intro, kept=None, started_at=len(done)
            ) as track,
        ):

            def keep(record: dict[str, Any]) -> None:
                if record["key"] not in done:
                    left[int(record["key"].split("/", 1)[0])] -= 1
                    track.item_done()
                done[record["key"]] = record
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                report()

            _run_points(sweep, todo, keep)
    except (KeyboardInterrupt, OSError, RuntimeError) as exc:
        missing = [p for p in sweep.points if p.key not in done]
        raise SweepInterrupted(
            _missing(sweep, missing, path, exc), interrupted=isinstance(exc, KeyboardInterrupt)
        ) from None
    results = _results(sweep, [done[p.key] for p in sweep.points])
    from schedkit.bench.sweep.report import write_sweep_report

    (out_dir / "sweep.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    write_sweep_report(out_dir, results)
    return results


def _intro(spec: SweepSpec, arms: int, total: int, kept: int) -> str:
    """The line a sweep's progress starts with: its probe points and their shape."""
    shape = " x ".join(
        f"{n} {word}{'s' if n != 1 else ''}"
        for n, word in ((arms, "arm"), (len(spec.rates), "rate"), (spec.replicates, "replicate"))
    )
    return f"sweep: {total:,} probe points ({shape}){f', {kept:,} kept' if kept else ''}"


def _results(sweep: Sweep, points: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``sweep.json`` holds: the sweep's settings and provenance, the curves, knees and
    goodputs (:func:`aggregate`) and every probe point, in the sweep's order."""
    spec = sweep.spec
    return {
        "schema_version": 1,
        "provenance": provenance(spec.bench.model_dump(mode="json")),
        "sweep": spec.model_dump(mode="json", exclude={"bench"}),
        "workload": {
            "name": sweep.bench.base.name,
            "requests_per_replicate": len(sweep.streams[0]),
            "trace_rate_rps": sweep.base_rate,
        },
        "engine": sweep.bench.engine_info,
        "slo": {"ttft_ms": spec.bench.stats.slo_ttft_ms, "tpot_ms": spec.bench.stats.slo_tpot_ms},
        "arm_settings": {a.label: a.overrides for a in sweep.bench.arms},
        **aggregate(sweep, points),
        "points": points,
    }


def _chunks(todo: list[Point], jobs: int) -> list[list[str]]:
    """A few points per task: one task per replay would cost more in pickling than a
    small replay takes; several tasks per process keep the processes busy to the end."""
    size = max(1, min(16, len(todo) // (jobs * 8)))
    return [[p.key for p in todo[i : i + size]] for i in range(0, len(todo), size)]


def _run_points(sweep: Sweep, todo: list[Point], keep: Callable[[dict[str, Any]], None]) -> None:
    if sweep.spec.ray is not None:
        if todo:
            _run_on_ray(sweep, todo, keep)
        return
    jobs = min(len(todo), sweep.spec.bench.jobs or len(os.sched_getaffinity(0)))
    if jobs < 2 or "fork" not in mp.get_all_start_methods():
        for point in todo:
            keep(sweep.run(point))
        return
    global _FORKED
    _FORKED = sweep
    chunks = _chunks(todo, jobs)
    try:
        with fork_pool(jobs) as pool:
            pending: set[Future[list[dict[str, Any]]]] = {
                pool.submit(_run_forked, c) for c in chunks
            }
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        for record in future.result():
                            keep(record)
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
    finally:
        _FORKED = None


def _run_on_ray(sweep: Sweep, todo: list[Point], keep: Callable[[dict[str, Any]], None]) -> None:
    """The probe points as Ray tasks: on a local Ray instance (``"local"``, one CPU per
    core or ``--jobs``), or on the cluster at ``address`` (``"auto"``: the one this
    machine belongs to). The replays are the same code as in the process pool, so the
    records are identical."""
    try:
        import ray
    except ImportError:
        raise SchedkitError(
            "--ray needs Ray: pip install 'schedkit[ray]' (or pip install ray)"
        ) from None
    address = sweep.spec.ray
    started = not ray.is_initialized()
    if started:
        if address == "local":
            cpus = sweep.spec.bench.jobs or len(os.sched_getaffinity(0))
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        else:
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise SchedkitError(
                    f"--ray {quote(address)}: cannot connect ({exc}); pass 'local' to start"
                    " Ray on this machine, 'auto' for the cluster it belongs to, or the"
                    " head's address (ray://HOST:10001)"
                ) from None
    try:
        shared = ray.put(sweep)
        task = ray.remote(_run_chunk)
        cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        pending = [task.remote(shared, chunk) for chunk in _chunks(todo, cpus)]
        try:
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                for record in ray.get(finished[0]):
                    keep(record)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        except Exception as exc:  # a task lost for good (after Ray's retries)
            for ref in pending:
                ray.cancel(ref, force=True)
            raise RuntimeError(f"a Ray task failed: {type(exc).__name__}") from exc
    finally:
        if started:
            ray.shutdown()


def _run_chunk(sweep: Sweep, keys: list[str]) -> list[dict[str, Any]]:
    points = {p.key: p for p in sweep.points}
    return [sweep.run(points[k]) for k in keys]


def _missing(sweep: Sweep, missing: list[Point], path: Path, exc: BaseException) -> str:
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped ({exc})"
    rates = sweep.spec.rates
    listed = ", ".join(
        f"{sweep.bench.arms[p.arm].label}@{rates[p.rate]:g}#{p.replicate}" for p in missing[:8]
    )
    more = f" and {len(missing) - 8:,} more" if len(missing) > 8 else ""
    return (
        f"the sweep was {why}: {len(sweep.points) - len(missing):,} of"
        f" {len(sweep.points):,} probe points are kept in {path}; missing: {listed}{more}"
        " (arm@rate#replicate). Run the same command again to run only the missing ones"
    )
