"""The adapter kit: what every engine adapter needs besides its views and its driver.

An adapter translates one engine's scheduler into schedkit's views and decisions. The
pieces that do not depend on the engine live here, written once:

- ``AdapterRuntime`` (``runtime``): the per-scheduler glue around the facade: hook
  timing and metrics through one place, rejection and finish bookkeeping (each request
  observed finishing exactly once), and step reports through a ``StepLedger``.
- ``StepLedger`` (``steps``): step reports keyed to the step they describe, so a
  pipelined scheduler (vLLM's async scheduling, SGLang's overlap loop), whose results
  arrive one or more steps late, can neither lose nor shift them.
- ``parse_metadata`` (``schedkit.metadata``): tenant, priority and SLO targets from the
  mapping a request carries (vLLM's ``vllm_xargs``, SGLang's ``custom_params``), one meaning
  everywhere.
- ``MetadataView`` (``metadata_view``): the ``tenant``, ``priority`` and SLO properties of
  an adapter's request view, within the trust bounds and the edge's seal, for every engine.
- ``check_engine_version`` (``versions``): the supported-version check with an error that
  names the installed and supported versions and the install command.
- ``warn_unsupported`` (``schedkit.capabilities``): the launch warning for hooks an engine
  honours only in part.
The kit loads no bench, no simulator and no numpy: an engine's scheduler process imports
it (checked by ``make lint``'s import contracts and by each adapter's suite). The
real-engine bench arm (``RealArm``) is bench harness, in ``schedkit.bench.engines.real_arm``;
the serve launchers share ``schedkit.edge.serving``. An adapter adds a
``RequestView``/``EngineView`` over its engine's objects and a driver (patches or a
scheduler subclass) that calls the runtime.
"""

from __future__ import annotations

from schedkit.adapter.metadata_view import MetadataView
from schedkit.adapter.runtime import REJECTED, AdapterRuntime
from schedkit.adapter.steps import StepLedger
from schedkit.adapter.versions import UnsupportedEngineError, check_engine_version, parse_version
from schedkit.metadata import RequestMetadata, parse_metadata, parse_priority

__all__ = [
    "REJECTED",
    "AdapterRuntime",
    "MetadataView",
    "RequestMetadata",
    "StepLedger",
    "UnsupportedEngineError",
    "check_engine_version",
    "parse_metadata",
    "parse_priority",
    "parse_version",
]


def __getattr__(name: str) -> object:
    """``schedkit.adapter.ReplayArm``, moved to ``schedkit.bench.engines.real_arm.RealArm`` (issue
    #36)."""
    if name == "ReplayArm":
        import importlib
        import warnings

        warnings.warn(
            "schedkit.adapter.ReplayArm moved to schedkit.bench.engines.real_arm.RealArm; import it"
            " from there (the old name goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("schedkit.bench.engines.real_arm").RealArm
    raise AttributeError(f"module 'schedkit.adapter' has no attribute {name!r}")
