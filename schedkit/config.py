"""The schedkit config: which policies, in which order, with which options.

``{"policy": ["slo", "vtc"], "options": {"vtc": {...}}}``, from a dict, a JSON string,
or a TOML/JSON file. ``"a+b"`` is shorthand for ``["a", "b"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schedkit.errors import PolicyConfigError, SchedkitError, quote
from schedkit.inputs import parse_document, read_document
from schedkit.trust import TrustConfig
from schedkit.validation import problems

DEFAULT_POLICY = "fcfs"


class SchedkitConfig(BaseModel):
    """Policies consulted in order (first wins), and options per policy name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: list[str] = Field(default_factory=lambda: [DEFAULT_POLICY], min_length=1)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    trust: TrustConfig = Field(default_factory=TrustConfig)  # docs/trust.md
    record_steps: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Write one CSV row per engine step to this file (schedkit calibrate).",
    )
    hook_budget_ms: float | None = Field(
        default=None,
        gt=0,
        le=60_000,
        description="Count (and log once) hook calls that take longer; off when unset.",
    )
    hook_budget_hard: bool = Field(
        default=False,
        strict=True,
        description="Abandon a hook call at hook_budget_ms; the engine's default decides.",
    )

    @field_validator("policy", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split("+")]
        if not isinstance(value, list | tuple):
            raise ValueError(
                "it takes a policy name, names joined by '+' such as 'slo+vtc', or a list of names"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> SchedkitConfig:
        if any(not name for name in self.policy):
            raise ValueError("policy names must be non-empty, e.g. 'fcfs' or 'slo+vtc'")
        dupes = sorted({n for n in self.policy if self.policy.count(n) > 1})
        if dupes:
            raise ValueError(f"policy {quote(dupes[0])} is selected twice; name each policy once")
        stray = sorted(set(self.options) - set(self.policy))
        if stray:
            raise ValueError(
                f"options given for {quote(stray[0])}, which is not selected;"
                f" selected: {quote(self.policy)}"
            )
        if self.hook_budget_hard and self.hook_budget_ms is None:
            raise ValueError(
                "hook_budget_hard = true needs hook_budget_ms, the budget in milliseconds"
                " (e.g. hook_budget_ms = 10)"
            )
        return self

    @property
    def label(self) -> str:
        return "+".join(self.policy)


def load_config(source: SchedkitConfig | Mapping[str, Any] | str | Path | None) -> SchedkitConfig:
    """Build a config from a dict, a JSON string, a policy name, or a .toml/.json file.

    A mapping with a single ``schedkit`` key (as in vLLM's ``--additional-config``) is
    unwrapped. ``None`` gives the default (``fcfs``).
    """
    if source is None:
        return SchedkitConfig()
    if isinstance(source, SchedkitConfig):
        return source
    where = "config"
    data: object
    if isinstance(source, Mapping):
        data = source
    elif isinstance(source, Path) or _looks_like_file(source):
        path = Path(source)
        where = f"config file {path}"
        data = _read_file(path)
    elif source.lstrip().startswith("{"):
        try:
            data = parse_document(source, "json")
        except ValueError as exc:
            raise PolicyConfigError(f"config is not valid JSON: {exc}") from exc
    else:
        data = {"policy": source}
    if isinstance(data, Mapping) and set(data) == {"schedkit"}:
        data = data["schedkit"]
    if isinstance(data, Mapping) and "engine" in data:
        raise PolicyConfigError(
            f"invalid schedkit {where}: an [engine] table sets the engine settings of a"
            " bench arm (schedkit bench --policy FILE); an engine takes its own flags"
            " (e.g. vllm serve --max-num-seqs 64). Drop the table here"
        )
    try:
        return SchedkitConfig.model_validate(data)
    except ValidationError as exc:
        said = problems(exc, SchedkitConfig, lambda loc: ".".join(map(str, loc)))
        raise PolicyConfigError(f"invalid schedkit {where}: {said}") from exc


def _looks_like_file(text: str) -> bool:
    try:
        return text.endswith((".toml", ".json")) or Path(text).is_file()
    except OSError:  # a name too long to be a path: a policy name (and an unknown one)
        return False


_CONFIG_FILE = 'a TOML or JSON text file such as: policy = ["slo", "vtc"]'


def read_config_file(path: Path) -> object:
    """The parsed content of a TOML or JSON config file, unvalidated."""
    return _read_file(path)


def _read_file(path: Path) -> object:
    try:
        text = read_document(path, "config file", _CONFIG_FILE)
    except SchedkitError as exc:
        raise PolicyConfigError(str(exc)) from None
    try:
        return parse_document(text, "toml" if path.suffix == ".toml" else "json")
    except ValueError as exc:
        raise PolicyConfigError(
            f"config file {path} is not valid {path.suffix[1:]}: {exc}"
        ) from exc
