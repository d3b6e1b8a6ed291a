"""``schedkit serve sglang --policy X -- <sglang args>``: SGLang's server with a policy.

The ``schedkit.serve`` entry point ``sglang``. It runs ``python -m sglang.launch_server
<sglang args>`` with the interpreter running schedkit. SGLang has no config slot for
plugins, so the policy travels in the environment, which SGLang's scheduler processes
inherit (see ``schedkit_sglang.config``). The child gets:

- ``SCHEDKIT_CONFIG`` holding the config as JSON; an environment that already selects a
  different config (``SCHEDKIT_CONFIG``/``SCHEDKIT_POLICY``/``SCHEDKIT_OPTIONS``) is
  refused rather than silently overridden;
- ``--radix-cache-backend schedkit`` when a selected policy implements
  ``select_evictions`` (the backend the plugin registers; without it SGLang's own cache
  evicts and the policy is never asked);
- on CPU (``--device cpu``, or ``SGLANG_USE_CPU_ENGINE=1`` already set):
  ``SGLANG_USE_CPU_ENGINE=1`` and ``schedkit_sglang.cpu.SITE_DIR`` first on
  ``PYTHONPATH``, which stubs SGLang's CUDA-only imports in every spawned process;
- with ``--enable-metrics``, ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory,
  unless already set). SGLang sets one itself, but only after plugins have loaded in the
  launcher process; setting it first keeps every process, whatever it imports when, in
  prometheus multiprocess mode, so the schedkit metrics counted in the scheduler process
  appear on the HTTP server's ``/metrics``.

The plugin validates the config again in every SGLang process, so a bad policy stops the
scheduler with schedkit's message even when SGLang is launched without this command
(``schedkit serve`` checks the config before launching, too). Before launching it also
refuses a ``--tp-size`` that the model's attention heads cannot be split over, which
SGLang finds only once its scheduler processes load the model (``check_engine_args``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from schedkit import PolicyFacade, SchedkitConfig
from schedkit.adapter.environ import with_config
from schedkit.edge.serving import (
    check_tensor_parallel,
    last_option,
    metrics_dir,
    option_value,
    run_server,
)
from schedkit.errors import SchedkitError

from schedkit_sglang.cpu import pythonpath

SERVER_MODULE = "sglang.launch_server"
RADIX_CACHE_BACKEND = "schedkit"
CPU_ENGINE_VAR = "SGLANG_USE_CPU_ENGINE"
METRICS_DIR_VAR = "PROMETHEUS_MULTIPROC_DIR"
TP_OPTIONS = ("--tp-size", "--tensor-parallel-size")  # srt/arg_groups/fields/parallel.py
# With these SGLang splits attention over fewer GPUs than --tp-size (attention data or
# context parallelism), or reads the heads from elsewhere than config.json.
TP_UNCHECKED = (
    "--attn-dp-size",
    "--attention-data-parallel-size",
    "--enable-dp-attention",
    "--attn-cp-size",
    "--attention-context-parallel-size",
    "--enable-prefill-cp",
    "--dcp-size",
    "--decode-context-parallel-size",
    "--json-model-override-args",
)

__all__ = ["build_command", "build_environ", "check_engine_args", "serve", "wants_metrics_dir"]


def _on_cpu(args: Sequence[str], environ: Mapping[str, str]) -> bool:
    device = option_value(args, "--device")
    return (device or "").strip().lower() == "cpu" or environ.get(CPU_ENGINE_VAR) == "1"


def build_command(
    config: SchedkitConfig, engine_args: Sequence[str], *, python: str | None = None
) -> list[str]:
    """The full server command line: SGLang's args, plus the radix-cache backend that
    eviction policies need."""
    args = list(engine_args)
    if PolicyFacade.from_config(config).has_evictions:
        if "--disable-radix-cache" in args:
            raise SchedkitError(
                "the selected policy chooses prefix-cache evictions, but --disable-radix-cache"
                " turns the prefix cache off; drop --disable-radix-cache or the policy"
            )
        backend = option_value(args, "--radix-cache-backend")
        if backend is None:
            args += ["--radix-cache-backend", RADIX_CACHE_BACKEND]
        elif backend != RADIX_CACHE_BACKEND:
            raise SchedkitError(
                f"the selected policy chooses prefix-cache evictions, which needs"
                f" --radix-cache-backend {RADIX_CACHE_BACKEND}, not {backend!r}; drop"
                " --radix-cache-backend (schedkit serve adds it)"
            )
    return [python or sys.executable, "-m", SERVER_MODULE, *args]


def wants_metrics_dir(engine_args: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the server needs a fresh ``PROMETHEUS_MULTIPROC_DIR``: metrics are on and
    none is set."""
    return "--enable-metrics" in engine_args and METRICS_DIR_VAR not in environ


def build_environ(
    config: SchedkitConfig,
    engine_args: Sequence[str],
    environ: Mapping[str, str],
    *,
    metrics_dir: str | None = None,
) -> dict[str, str]:
    """The server's environment: ``environ`` with the schedkit selection (and ``schedkit``
    added to an ``SGLANG_PLUGINS`` allow-list), the CPU stand-ins when SGLang runs on CPU,
    and ``metrics_dir`` as ``PROMETHEUS_MULTIPROC_DIR`` if given and none is set."""
    env = with_config(config, environ)
    allowed = [name.strip() for name in env.get("SGLANG_PLUGINS", "").split(",") if name.strip()]
    if allowed and "schedkit" not in allowed:  # SGLang's allow-list would skip the adapter
        env["SGLANG_PLUGINS"] = ",".join([*allowed, "schedkit"])
    if _on_cpu(engine_args, env):
        env[CPU_ENGINE_VAR] = "1"
        env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH", ""))
    if metrics_dir is not None and METRICS_DIR_VAR not in env:
        env[METRICS_DIR_VAR] = metrics_dir
    return env


def check_engine_args(engine_args: Sequence[str]) -> None:
    """Refuse, before SGLang starts, a ``--tp-size``/``--tensor-parallel-size`` that does
    not split the model's attention heads as SGLang's ``QKVParallelLinear`` requires. The
    model is ``--model-path``/``--model``; nothing is checked with an option in
    ``TP_UNCHECKED``."""
    model = last_option(engine_args, ("--model-path", "--model"))
    check_tensor_parallel(
        engine_args, TP_OPTIONS, None if model is None else model[1], unless=TP_UNCHECKED
    )


def serve(config: SchedkitConfig, engine_args: list[str]) -> int:
    """Run SGLang's server with ``config`` until it exits; return its exit code.

    SIGTERM and SIGINT are passed on to the server, which shuts down cleanly.
    """
    check_engine_args(engine_args)
    command = build_command(config, engine_args)
    wanted = wants_metrics_dir(engine_args, os.environ)
    with metrics_dir("schedkit-sglang-metrics-", wanted) as path:
        env = build_environ(config, engine_args, os.environ, metrics_dir=path)
        label = "+".join(config.policy)
        print(f"schedkit: {' '.join(command[:3])} ... (policy {label})", file=sys.stderr)
        return run_server(command, env)
