"""schedkit-vllm: schedkit policies inside vLLM's V1 scheduler.

Launch vLLM with ``--scheduler-cls schedkit_vllm.Scheduler`` (or
``schedkit_vllm.AsyncScheduler`` where async scheduling is on, the GPU default) and select
policies with ``--additional-config '{"schedkit": {"policy": ["priority"]}}'`` or a
``SCHEDKIT_CONFIG`` file. Importing this package does not import vLLM: the scheduler
classes are loaded, and the installed vLLM version checked, on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schedkit_vllm.compat import SUPPORTED, UnsupportedVllmError

if TYPE_CHECKING:
    from schedkit_vllm.scheduler import AsyncScheduler, Scheduler

__version__ = "0.1.0"
__all__ = ["SUPPORTED", "AsyncScheduler", "Scheduler", "UnsupportedVllmError", "__version__"]


def __getattr__(name: str) -> Any:
    # vLLM takes ~10 s to import: only the scheduler classes pull it in.
    if name in ("Scheduler", "AsyncScheduler"):
        from schedkit_vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module 'schedkit_vllm' has no attribute {name!r}")
