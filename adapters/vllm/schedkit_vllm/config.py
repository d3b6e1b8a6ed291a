"""Where the vLLM adapter finds its schedkit config, read when the scheduler is built.

``--additional-config '{"schedkit": {...}}'`` (``VllmConfig.additional_config``) wins;
otherwise the ``SCHEDKIT_CONFIG`` environment variable may name a ``.toml``/``.json``
file. Neither: no schedkit config, and the scheduler is stock vLLM.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schedkit import SchedkitConfig, load_config
from schedkit.errors import PolicyConfigError

ENV_VAR = "SCHEDKIT_CONFIG"
KEY = "schedkit"


def resolve_config(
    additional_config: Any, environ: Mapping[str, str] | None = None
) -> SchedkitConfig | None:
    """The schedkit config selected for this engine, or ``None`` for stock vLLM."""
    if isinstance(additional_config, Mapping) and KEY in additional_config:
        section = additional_config[KEY]
        if section is None:
            return None
        if not isinstance(section, Mapping | str):
            raise PolicyConfigError(
                f"additional_config['{KEY}'] must be an object like"
                f' {{"policy": ["priority"]}}, not {type(section).__name__}'
            )
        return load_config(section)
    path = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not path:
        return None
    if not Path(path).is_file():
        raise PolicyConfigError(
            f"{ENV_VAR}={path!r} does not name a file; point it at a .toml or .json"
            " schedkit config, or unset it"
        )
    return load_config(Path(path))
