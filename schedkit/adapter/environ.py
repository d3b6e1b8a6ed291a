"""Where an adapter finds its schedkit config when the engine has no slot for one:
environment variables, read in every engine process (SGLang's schedulers, LMDeploy's
engine process) since child processes inherit the launcher's environment.

- ``SCHEDKIT_CONFIG``: a ``.toml``/``.json`` config file, or the config as JSON text
  (``{"policy": ["slo", "vtc"], "options": {...}}``);
- or ``SCHEDKIT_POLICY`` (``"slo+vtc"``) with optional ``SCHEDKIT_OPTIONS`` (a JSON
  object of options per policy).

Neither set: no schedkit config, and the engine is stock.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from schedkit import SchedkitConfig, load_config
from schedkit.errors import PolicyConfigError

CONFIG_VAR = "SCHEDKIT_CONFIG"
POLICY_VAR = "SCHEDKIT_POLICY"
OPTIONS_VAR = "SCHEDKIT_OPTIONS"
__all__ = [
    "CONFIG_VAR",
    "OPTIONS_VAR",
    "POLICY_VAR",
    "config_environ",
    "resolve_config",
    "scoped_environ",
    "with_config",
]


def resolve_config(environ: Mapping[str, str] | None = None) -> SchedkitConfig | None:
    """The schedkit config selected by the environment, or ``None`` for the stock engine."""
    env = os.environ if environ is None else environ
    source = env.get(CONFIG_VAR, "").strip()
    policy = env.get(POLICY_VAR, "").strip()
    options = env.get(OPTIONS_VAR, "").strip()
    if source and (policy or options):
        raise PolicyConfigError(
            f"both {CONFIG_VAR} and {POLICY_VAR}/{OPTIONS_VAR} are set; select the policy"
            " one way, not both"
        )
    if source:
        if source.startswith("{"):
            return load_config(source)
        if not Path(source).is_file():
            raise PolicyConfigError(
                f"{CONFIG_VAR}={source!r} is neither a JSON object nor a file; point it at"
                " a .toml or .json schedkit config, or unset it"
            )
        return load_config(Path(source))
    if options and not policy:
        raise PolicyConfigError(f"{OPTIONS_VAR} is set but {POLICY_VAR} is not; name the policy")
    if not policy:
        return None
    try:
        parsed = json.loads(options) if options else {}
    except json.JSONDecodeError as exc:
        raise PolicyConfigError(f"{OPTIONS_VAR} is not valid JSON: {exc}") from exc
    return load_config({"policy": policy, "options": parsed})


def config_environ(config: SchedkitConfig) -> dict[str, str]:
    """Environment variables that select ``config`` in engine processes started later."""
    return {CONFIG_VAR: json.dumps(config.model_dump(mode="json"), separators=(",", ":"))}


def with_config(config: SchedkitConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` selecting ``config`` (for a server launched with it). An environment
    that already selects a different config is refused rather than silently overridden."""
    env = dict(environ)
    if any(env.get(var, "").strip() for var in (CONFIG_VAR, POLICY_VAR, OPTIONS_VAR)):
        selected = resolve_config(env)
        if selected is None or selected.model_dump() != config.model_dump():
            raise PolicyConfigError(
                f"the environment already selects a schedkit config ({CONFIG_VAR},"
                f" {POLICY_VAR} or {OPTIONS_VAR}) that differs from --policy/--options;"
                " unset those variables or select the policy there only"
            )
        for var in (CONFIG_VAR, POLICY_VAR, OPTIONS_VAR):
            env.pop(var, None)
    env.update(config_environ(config))
    return env


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, unset) ``values`` in ``os.environ`` for the block, for engine
    processes started inside it; the previous values come back afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
