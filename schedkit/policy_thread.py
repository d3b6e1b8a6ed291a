"""A hard hook budget: one policy's hook calls, each run on a thread of the policy's own
and waited for at most the budget.

Python cannot stop a running function safely, so a call over the budget is abandoned, not
interrupted: it runs on to its end on the policy's thread while the engine goes on without
its answer. Until it ends, the policy's later calls are not made (``HookBusy``), so a
policy never runs two calls at once and never holds the engine up twice for one stall.
When it ends, the policy is consulted again.

The handoff is a ``queue.SimpleQueue`` of calls and a lock per call that the thread
releases when the call is done: about 13 us a call, nearly all of it the two thread
wake-ups, against 16 us through a one-thread ``concurrent.futures`` pool
(``benchmarks/speed/bench_hook_budget.py``), whose threads are also joined at interpreter exit:
a hung abandoned call would keep the process from exiting. This thread is a daemon.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from schedkit.answers import describe_exception

__all__ = ["HookBusy", "HookRaised", "HookTimeout", "PolicyThread"]


class HookTimeout(Exception):
    """The call ran past the budget and was abandoned: it runs on, its answer unused."""


class HookBusy(Exception):
    """The call was not made: the policy's abandoned call has not returned yet."""


class HookRaised(Exception):
    """The call raised ``exception`` on the policy's thread, where nothing a policy raises
    stops the process (``answers.stops_process``); ``description`` was made there too, so
    an exception's ``__str__`` runs within the budget."""

    def __init__(self, exception: BaseException, description: str) -> None:
        super().__init__(description)
        self.exception = exception
        self.description = description


class _Call:
    __slots__ = ("args", "description", "done", "fn", "raised", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.result: Any = None
        self.raised: BaseException | None = None
        self.description = ""
        self.done = threading.Lock()  # released by the policy's thread when the call ends
        self.done.acquire()


class _Progress:
    __slots__ = ("finished",)

    def __init__(self) -> None:
        self.finished = 0  # calls the policy's thread ended; only that thread writes it


class PolicyThread:
    """The thread one policy's hook calls run on, started on the first call."""

    def __init__(self, policy: str, budget_s: float) -> None:
        self.policy = policy
        self.budget_s = budget_s
        self._started = 0  # calls handed to the thread; only the engine's thread writes it
        self._progress = _Progress()
        self._jobs: queue.SimpleQueue[_Call | None] | None = None
        _LIVE.add(self)

    @property
    def busy(self) -> bool:
        """An abandoned call is still running."""
        return self._progress.finished != self._started

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the policy's thread, waited for at most the budget. Raises
        ``HookBusy`` (not called), ``HookTimeout`` (abandoned) or ``HookRaised``."""
        if self._progress.finished != self._started:
            raise HookBusy
        jobs = self._jobs
        if jobs is None:
            jobs = self._start()
        job = _Call(fn, args)
        self._started += 1  # before the wait: a Ctrl-C there leaves the call running
        jobs.put(job)
        if not job.done.acquire(timeout=self.budget_s):
            raise HookTimeout
        if job.raised is not None:
            raise HookRaised(job.raised, job.description)
        return job.result

    def _start(self) -> queue.SimpleQueue[_Call | None]:
        jobs: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        # The thread holds the queue and the progress, not this object: when the facade
        # goes, so does this object, and the finalizer ends the thread.
        threading.Thread(
            target=_serve,
            args=(jobs, self._progress),
            name=f"schedkit-policy-{self.policy}",
            daemon=True,  # an abandoned call that never returns does not block exit
        ).start()
        weakref.finalize(self, jobs.put, None)
        self._jobs = jobs
        return jobs

    def _forget_thread(self) -> None:
        """In a forked child: the thread (and any call it ran) stayed in the parent."""
        self._jobs = None
        self._started = 0
        self._progress = _Progress()


def _serve(jobs: queue.SimpleQueue[_Call | None], progress: _Progress) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        try:
            job.result = job.fn(*job.args)
        except BaseException as exc:  # off the main thread, all of it is the policy's fault
            job.raised = exc
            job.description = describe_exception(exc)
        progress.finished += 1  # before the release: the caller's next call sees it
        job.done.release()
        del job  # the arguments and the answer go with the caller's reference


_LIVE: weakref.WeakSet[PolicyThread] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for thread in list(_LIVE):
        thread._forget_thread()


os.register_at_fork(after_in_child=_after_fork_in_child)
