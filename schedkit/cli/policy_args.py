"""What ``--policy`` and ``--options`` give: a config (``schedkit serve``, ``schedkit
contract``)."""

from __future__ import annotations

from typing import Any

from schedkit.config import SchedkitConfig
from schedkit.errors import SchedkitError
from schedkit.inputs import parse_document

__all__ = ["config_with_options"]


def config_with_options(policy: str, options: str | None) -> SchedkitConfig:
    """``--policy`` (a name, a composition or a config file) with ``--options`` JSON over
    its own options; a config file's trust section stays."""
    from schedkit.config import load_config

    config = load_config(policy)
    if options is None:
        return config
    return load_config(
        {
            "policy": config.policy,
            "options": {**config.options, **_json_object(options)},
            "trust": config.trust.model_dump(),
        }
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = parse_document(text, "json")
    except ValueError as exc:
        raise SchedkitError(f"--options is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SchedkitError('--options must be a JSON object like {"policy-name": {...}}')
    return value
