"""The ``sglang.srt.plugins`` entry point ``schedkit``: SGLang calls ``load()`` first thing
in every process that loads plugins (scheduler, engine, detokenizer).

Without a schedkit config in the environment (``schedkit_sglang.config``) it registers
nothing and SGLang runs stock. With one, it checks the SGLang version, builds the policy
facade and registers the patches those policies need (``schedkit_sglang.patches``) and
the ``schedkit`` radix-cache backend (``schedkit_sglang.eviction``).

SGLang logs and swallows exceptions raised by plugins, so a bad config (unknown policy,
bad options, unsupported SGLang) is not raised here: ``load()`` logs it and makes every
scheduler fail at construction with that message, which stops the launch.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from schedkit import PolicyFacade
from schedkit.errors import SchedkitError

from schedkit_sglang.config import TIMING_VAR, resolve_config

log = logging.getLogger("schedkit.sglang")

_SCHEDULER_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"


def load() -> None:
    """Register schedkit's hooks with SGLang when a schedkit config is selected."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        config = resolve_config()
        if config is None:
            return
        from schedkit_sglang.compat import check_version, installed_version

        check_version(installed_version())
        facade = PolicyFacade.from_config(config)
    except (SchedkitError, ImportError) as exc:
        log.error("schedkit: %s", exc)
        HookRegistry.register(_SCHEDULER_INIT, _refuse(exc), HookType.BEFORE)
        return
    from schedkit_sglang import eviction, patches

    timing = os.environ.get(TIMING_VAR) == "1"
    planned = patches.plan(facade, timing, config.trust, config.record_steps)
    for target, (hook, kind) in planned.items():
        HookRegistry.register(target, hook, HookType[kind])
    eviction.register()  # --radix-cache-backend schedkit works with any selection
    if _is_http_launcher():
        from schedkit_sglang import trust

        HookRegistry.register(trust.SETUP_TARGET, trust.install_hook(config.trust), HookType.BEFORE)
    log.info("schedkit: policies %s selected for SGLang", facade.label)


def _is_http_launcher() -> bool:
    """Whether this is the process that serves SGLang's HTTP API (``python -m
    sglang.launch_server`` or ``sglang serve``), where the trust middleware goes; other
    processes (schedulers, an in-process ``sglang.Engine``) never import the server."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) == "sglang.launch_server":
        return True
    return Path(sys.argv[0]).name == "sglang" and sys.argv[1:2] == ["serve"]


def _refuse(error: Exception) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise error

    return refuse
