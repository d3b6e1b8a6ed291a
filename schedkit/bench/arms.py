"""Bench arms: a policy and the engine settings it runs with.

``--policy X`` is an arm with the bench's engine settings; ``--arm
name=seqs64,policy=fcfs,max_num_seqs=64`` (or a config file with an ``[engine]`` table)
sets some of them for one arm. Every arm replays the identical request stream, so
the paired comparisons between arms read the same whether they differ in policy, in
engine settings, or both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schedkit.bench.settings import ENGINE_KEYS, EngineSettings, KvCacheDtype
from schedkit.config import SchedkitConfig, load_config, read_config_file
from schedkit.errors import SchedkitError, quote
from schedkit.validation import problem
from schedkit.validation import unknown as unknown_name

POLICY_KEYS = ("policy", "prefill_policy", "decode_policy")  # --arm keys naming policies

__all__ = [
    "ENGINE_KEYS",
    "ArmSpec",
    "EngineSettings",
    "KvCacheDtype",
    "arm_labels",
    "parse_arm",
    "resolve_arms",
]


class ArmSpec(BaseModel):
    """One ``--arm``: a name (optional), a policy (a name, ``a+b`` or a config file)
    and engine settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=64)
    policy: str = "fcfs"
    # a disaggregated arm's policies for one pool, instead of ``policy`` (which routes)
    prefill_policy: str | None = None
    decode_policy: str | None = None
    engine: EngineSettings = Field(default_factory=EngineSettings)


def parse_arm(text: str) -> ArmSpec:
    """``name=seqs64,policy=fcfs,max_num_seqs=64`` as an :class:`ArmSpec`; a clear error
    naming the arm and the key otherwise."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SchedkitError(
                f"--arm {quote(text)}: {quote(part)} is not KEY=VALUE; write e.g."
                " --arm name=seqs64,policy=fcfs,max_num_seqs=64"
            )
        if key in fields:
            raise SchedkitError(f"--arm {quote(text)} sets {key} twice; set it once")
        fields[key] = value.strip()
    name = fields.pop("name", None)
    label = quote(name if name is not None else text)
    unknown = sorted(set(fields) - {*POLICY_KEYS, *ENGINE_KEYS})
    if unknown:
        keys = ("name", *POLICY_KEYS, *ENGINE_KEYS)
        raise SchedkitError(f"--arm {label}: {unknown_name('key', unknown[0], keys)}")
    policies = {key: fields.pop(key) for key in POLICY_KEYS if key in fields}
    engine = _settings(fields, f"--arm {label}")
    pooled = [key for key in POLICY_KEYS[1:] if key in policies]
    if pooled and not (engine.prefill_replicas or engine.decode_replicas):
        raise SchedkitError(
            f"--arm {label}: {pooled[0]} sets the policies of a disaggregated arm's pool; set"
            " prefill_replicas and decode_replicas too (or use policy=)"
        )
    return ArmSpec(name=name, engine=engine, **policies)


def _settings(values: Mapping[str, Any], where: str) -> EngineSettings:
    try:
        return EngineSettings.model_validate(dict(values))
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise SchedkitError(f"{where}: {problems}") from None


def _problem(error: Mapping[str, Any]) -> str:
    """``max_num_seqs: '0' is not accepted; it takes an integer greater than 0``."""
    return problem(error, EngineSettings, lambda loc: ".".join(map(str, loc)))


class ResolvedArm(BaseModel):
    """An arm as the bench runs it: its label, policies and engine overrides."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    label: str
    source: str  # the policy as given (name, composition or file)
    config: SchedkitConfig
    overrides: dict[str, Any]
    # a disaggregated arm's prefill and decode pools' policies, where not ``config``'s
    pool_configs: tuple[SchedkitConfig | None, SchedkitConfig | None] = (None, None)


def resolve_arms(policies: Sequence[str], arms: Sequence[ArmSpec]) -> list[ResolvedArm]:
    """The ``--policy`` arms, then the ``--arm`` ones, with their configs loaded (a
    config file's ``[engine]`` table under the arm's own settings)."""
    specs = [ArmSpec(policy=p) for p in policies] + list(arms)
    configs, overrides = [], []
    for spec in specs:
        config, engine = _load(spec.policy)
        configs.append(config)
        overrides.append({**engine, **spec.engine.overrides()})
    labels = arm_labels(specs, configs)
    return [
        ResolvedArm(
            label=label,
            source=spec.policy,
            config=config,
            overrides=over,
            pool_configs=(_pool(spec.prefill_policy), _pool(spec.decode_policy)),
        )
        for label, spec, config, over in zip(labels, specs, configs, overrides, strict=True)
    ]


def _pool(policy: str | None) -> SchedkitConfig | None:
    return None if policy is None else load_config(policy)


def _load(policy: str) -> tuple[SchedkitConfig, dict[str, Any]]:
    """A policy's config, and the engine settings of a config file's ``[engine]`` table."""
    if not policy.endswith((".toml", ".json")):
        return load_config(policy), {}
    data = read_config_file(Path(policy))
    if isinstance(data, Mapping) and "engine" in data:
        rest = {k: v for k, v in data.items() if k not in ("engine", "name")}
        engine = data["engine"]
        if not isinstance(engine, Mapping):
            raise SchedkitError(
                f"{policy}: [engine] must be a table of settings, e.g. max_num_seqs = 64;"
                f" valid keys: {', '.join(ENGINE_KEYS)}"
            )
        return load_config(rest), _settings(engine, f"{policy} [engine]").overrides()
    return load_config(policy), {}


def arm_labels(specs: Sequence[ArmSpec], configs: Sequence[SchedkitConfig]) -> list[str]:
    """One distinct label per arm: its name; else a config file's stem or the policies,
    with the settings the ``--arm`` itself sets (``fcfs[max_num_seqs=64]``; a file's
    ``[engine]`` table is the file's); numbered if repeated."""
    names = []
    for spec, config in zip(specs, configs, strict=True):
        if spec.name is not None:
            names.append(spec.name)
            continue
        is_file = spec.policy.endswith((".toml", ".json"))
        base = Path(spec.policy).stem if is_file else config.label
        pools = {"prefill_policy": spec.prefill_policy, "decode_policy": spec.decode_policy}
        given = {**{k: v for k, v in pools.items() if v}, **spec.engine.overrides()}
        extra = ",".join(f"{k}={v}" for k, v in given.items())
        names.append(f"{base}[{extra}]" if extra else base)
    return [
        f"{n}#{names[:i].count(n) + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)
    ]
