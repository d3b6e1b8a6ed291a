"""schedkit: pluggable scheduling policies for LLM serving engines."""

from __future__ import annotations

from schedkit import _moved
from schedkit._markers import hookimpl
from schedkit.config import SchedkitConfig, load_config
from schedkit.decisions import Admission, BatchBudget, StepReport
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.hookspecs import Key
from schedkit.plugins import PolicyRegistry
from schedkit.policy import Policy, PolicyOptions
from schedkit.views import (
    BlockState,
    BlockView,
    EngineState,
    EngineView,
    ReplicaState,
    ReplicaView,
    RequestState,
    RequestView,
)

__version__ = "0.3.0"

_moved.install()  # modules that moved keep their old names, with a warning

__all__ = [
    "Admission",
    "BatchBudget",
    "BlockState",
    "BlockView",
    "EngineState",
    "EngineView",
    "Key",
    "Policy",
    "PolicyFacade",
    "PolicyOptions",
    "PolicyRegistry",
    "ReplicaState",
    "ReplicaView",
    "RequestState",
    "RequestView",
    "SchedkitConfig",
    "SchedkitError",
    "StepReport",
    "__version__",
    "hookimpl",
    "load_config",
]
