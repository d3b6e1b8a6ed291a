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
import signal
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import util
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent says what Ctrl-C stopped


class _ForkPool(ProcessPoolExecutor):
    """Left by an exception (Ctrl-C in the parent, a failed run), the pool cancels what
    has not started and ends its workers, instead of waiting for their runs to finish."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """As ``ProcessPoolExecutor.submit``, with Ctrl-C held until it returns: the first
        call forks the workers, and a KeyboardInterrupt in the middle of that would leave
        a worker the pool does not know of (alive after schedkit exits)."""
        if threading.current_thread() is not threading.main_thread():
            return super().submit(fn, *args, **kwargs)
        held: list[int] = []
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
        try:
            return super().submit(fn, *args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
            if held and callable(previous):
                previous(signal.SIGINT, None)  # default_int_handler: KeyboardInterrupt

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if exc_type is not None:
            terminate = getattr(self, "terminate_workers", None)  # Python 3.14
            if terminate is not None:
                terminate()
            else:
                processes = list((getattr(self, "_processes", None) or {}).values())
                self.shutdown(wait=False, cancel_futures=True)
                for process in processes:
                    process.terminate()
        return super().__exit__(exc_type, exc, tb)


def fork_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes forked from this one, each running its exit-time
    code (``atexit``, ``weakref.finalize``) when the pool shuts down; one left by an
    exception ends its workers at once."""
    return _ForkPool(workers, mp_context=mp.get_context("fork"), initializer=_start_worker)
