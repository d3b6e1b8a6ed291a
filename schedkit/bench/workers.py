"""The worker processes simulator runs fan out to (bench arms, sweep points, plan
candidates), and the exit-time code that runs in them.

The workers are forked from schedkit's process, so they share the parsed workload.
A forked ``ProcessPoolExecutor`` worker returns from its loop when the pool shuts down,
runs ``multiprocessing``'s exit function (``util._exit_function``, from
``BaseProcess._bootstrap``) and ends with ``os._exit``: the interpreter's own exit, which
runs ``atexit`` handlers and ``weakref.finalize`` callbacks, never happens there. A
policy's exit-time code (flushing its statistics, closing its files) would then run with
``--jobs 1``, where the arms run in schedkit's own process, and silently not in workers.
:func:`fork_pool`'s workers run it at their exit, as that process does at its own.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import weakref
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import util
from typing import Any

__all__ = ["fork_pool"]

# Run in ``util._exit_function``'s first pass (priority >= 0), before it joins children.
_EXIT_PRIORITY = 0


def _start_worker() -> None:
    """The pool's initializer: each worker runs, at its exit, the ``atexit`` handlers and
    ``weakref.finalize`` callbacks registered in it, and only those."""
    # What the parent registered before the fork is the parent's to run, once.
    atexit._clear()
    registry: dict[weakref.finalize[..., Any], object] = getattr(weakref.finalize, "_registry", {})
    for inherited in list(registry):
        inherited.atexit = False
    # The next finalize made here registers weakref's exit function again (atexit, above).
    weakref.finalize._registered_with_atexit = False  # type: ignore[attr-defined]
    util.Finalize(None, atexit._run_exitfuncs, exitpriority=_EXIT_PRIORITY)


def fork_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes forked from this one, each running its exit-time
    code (``atexit``, ``weakref.finalize``) when the pool shuts down."""
    return ProcessPoolExecutor(
        workers, mp_context=mp.get_context("fork"), initializer=_start_worker
    )
