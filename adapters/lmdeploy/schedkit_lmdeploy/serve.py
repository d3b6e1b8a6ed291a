"""``schedkit serve lmdeploy --policy X -- <lmdeploy args>``: LMDeploy's server with a
policy.

The ``schedkit.serve`` entry point ``lmdeploy``. It runs ``python -m
schedkit_lmdeploy.launch <lmdeploy args>`` (LMDeploy's CLI, e.g. ``serve api_server
MODEL``) with the interpreter running schedkit and ``SCHEDKIT_CONFIG`` holding the config
as JSON; an environment that already selects a different config is refused. Policies run
in LMDeploy's PyTorch engine only: ``--backend pytorch`` is added when no backend is
given (LMDeploy would pick TurboMind, whose scheduler is C++, for the models it
supports), and ``--backend turbomind`` or ``--mp-engine-backend ray`` are refused.
LMDeploy's engine needs a GPU (cuda, ascend, maca or camb): on this project's CPU
machines the launcher's command and environment are tested, not a running server
(``benchmarks/lmdeploy/gpu.sh`` runs one on a GPU machine).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from schedkit import SchedkitConfig
from schedkit.adapter.environ import with_config
from schedkit.errors import SchedkitError
from schedkit.serving import option_value, run_server

LAUNCH_MODULE = "schedkit_lmdeploy.launch"

__all__ = ["build_command", "build_environ", "serve"]


def build_command(engine_args: Sequence[str], *, python: str | None = None) -> list[str]:
    """The server command line: LMDeploy's CLI args, on the PyTorch engine."""
    args = list(engine_args)
    if not args:
        raise SchedkitError(
            "no LMDeploy command given; pass LMDeploy's arguments after --, e.g."
            " `schedkit serve lmdeploy --policy slo -- serve api_server MODEL`"
        )
    backend = option_value(args, "--backend")
    if backend is None:
        args += ["--backend", "pytorch"]
    elif backend != "pytorch":
        raise SchedkitError(
            f"schedkit policies run in LMDeploy's PyTorch engine, not --backend {backend}"
            " (TurboMind schedules in C++); use --backend pytorch or drop --backend"
        )
    if option_value(args, "--mp-engine-backend") not in (None, "mp"):
        raise SchedkitError(
            "--mp-engine-backend ray builds LMDeploy's engine in a Ray actor, where"
            " schedkit is not activated; drop --mp-engine-backend (the default is mp)"
        )
    return [python or sys.executable, "-m", LAUNCH_MODULE, *args]


def build_environ(config: SchedkitConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: ``environ`` with the schedkit selection."""
    return with_config(config, environ)


def serve(config: SchedkitConfig, engine_args: list[str]) -> int:
    """Run LMDeploy's server with ``config`` until it exits; return its exit code.
    SIGTERM and SIGINT are passed on to the server."""
    command = build_command(engine_args)
    env = build_environ(config, os.environ)
    label = "+".join(config.policy)
    print(f"schedkit: {' '.join(command[:3])} ... (policy {label})", file=sys.stderr)
    return run_server(command, env)
