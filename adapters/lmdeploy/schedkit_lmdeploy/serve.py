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
(``benchmarks/engines/lmdeploy_gpu.sh`` runs one on a GPU machine). Before launching, a ``--tp``
that the model's attention heads cannot be split over is refused
(``check_engine_args``); LMDeploy would find it only once its engine loads the model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from schedkit import SchedkitConfig
from schedkit.adapter.environ import with_config
from schedkit.edge.serving import check_tensor_parallel, option_value, run_server
from schedkit.errors import SchedkitError

LAUNCH_MODULE = "schedkit_lmdeploy.launch"
# LMDeploy's commands that take the model first and --tp (lmdeploy/cli/cli.py, serve.py).
MODEL_COMMANDS = (("chat",), ("serve", "api_server"))
# With these, attention is not split over --tp GPUs (pytorch/config.py DistConfig: tp/dp,
# or ep): the check is left to LMDeploy.
TP_UNCHECKED = ("--dp", "--ep")

__all__ = ["build_command", "build_environ", "check_engine_args", "serve"]


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


def check_engine_args(engine_args: Sequence[str]) -> None:
    """Refuse, before LMDeploy starts, a ``--tp`` that does not split the model's
    attention heads as LMDeploy's PyTorch engine requires (``ModelConfig.from_pretrained``
    asserts it). The model is the first argument after ``chat`` or ``serve api_server``."""
    model = None
    for command in MODEL_COMMANDS:
        rest = list(engine_args[len(command) :])
        if tuple(engine_args[: len(command)]) == command and rest and not rest[0].startswith("-"):
            model = rest[0]
    check_tensor_parallel(engine_args, ("--tp",), model, unless=TP_UNCHECKED)


def serve(config: SchedkitConfig, engine_args: list[str]) -> int:
    """Run LMDeploy's server with ``config`` until it exits; return its exit code.
    SIGTERM and SIGINT are passed on to the server."""
    check_engine_args(engine_args)
    command = build_command(engine_args)
    env = build_environ(config, os.environ)
    label = "+".join(config.policy)
    print(f"schedkit: {' '.join(command[:3])} ... (policy {label})", file=sys.stderr)
    return run_server(command, env)
