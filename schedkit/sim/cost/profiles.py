"""Hardware and model profiles the simulator's cost model is built from.

Built-in GPUs and Llama-style models, looked up by name (case-insensitive), plus
user profiles loaded from a TOML/JSON file with ``[[gpu]]`` / ``[[model]]`` tables, plus
a model read from a local Hugging Face model folder or ``config.json`` given as its path.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedkit import tensor_parallel
from schedkit.errors import SchedkitError, quote
from schedkit.inputs import parse_document, read_document
from schedkit.sim.cost.hf_config import find_config_file, looks_like_path, model_from_config
from schedkit.sim.cost.shape import ModelProfile as ModelProfile

KV_CACHE_DTYPES = {  # vLLM's --kv-cache-dtype: bytes per element (0: the model's dtype)
    "auto": 0,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


@dataclass(frozen=True)
class GPUProfile:
    """One accelerator: dense bf16 compute, memory bandwidth and memory size."""

    name: str
    tflops: float
    mem_bw_gbs: float
    mem_gb: float


# Memory each GPU keeps for activations and the CUDA context, outside the KV cache.
ACTIVATION_RESERVE_BYTES_PER_GPU = 1e9


def tp_degrees(model: ModelProfile) -> list[int]:
    """The tensor-parallel degrees ``model`` can be split over, as vLLM and SGLang split
    it: each divides the attention heads, and divides the KV heads or is a multiple of
    them (each KV head then replicated on ``tp / num_kv_heads`` GPUs)."""
    return tensor_parallel.tp_degrees(model.num_heads, model.num_kv_heads)


def check_tp(model: ModelProfile, tp: int) -> None:
    """Raise :class:`SchedkitError` unless ``tp`` is one of :func:`tp_degrees`."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise SchedkitError(f"tp must be >= 1, got {quote(tp)}; it counts GPUs (an integer)")
    heads, kv = model.num_heads, model.num_kv_heads
    if tensor_parallel.tp_splits(heads, kv, tp):
        return
    if heads % tp:
        why = f"does not divide its {heads} attention heads"
    else:
        why = f"neither divides its {kv} KV heads nor is a multiple of them"
    raise SchedkitError(
        f"--tp {tp} cannot split {model.name} across GPUs: {tp} {why}, so no engine could"
        f" shard it that way; use --tp {_one_of(tp_degrees(model))}"
    )


def _one_of(values: list[int]) -> str:
    """``[1, 2, 4]`` -> ``1, 2 or 4``."""
    text = ", ".join(map(str, values))
    return text if len(values) < 2 else f"{text.rsplit(', ', 1)[0]} or {values[-1]}"


def kv_capacity_tokens(
    model: ModelProfile, gpu: GPUProfile, tp: int = 1, gpu_memory_utilization: float = 0.9
) -> int:
    """KV-cache tokens that fit once weights and the activation reserve are placed (with
    ``tp`` above the KV heads, each KV head is stored on ``tp / num_kv_heads`` GPUs)."""
    check_tp(model, tp)
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise SchedkitError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    per_gpu = gpu.mem_gb * 1e9 * gpu_memory_utilization - ACTIVATION_RESERVE_BYTES_PER_GPU
    free = tp * per_gpu - model.weight_bytes
    replicas = max(1, tp // model.num_kv_heads)
    tokens = int(free // (model.kv_bytes_per_token * replicas)) if free > 0 else 0
    if tokens > 0:
        return tokens
    usable = f"{tp * gpu.mem_gb * gpu_memory_utilization:.0f} GB"
    if per_gpu <= 0:
        fix = "raise gpu_memory_utilization"
    else:
        need = int(model.weight_bytes // per_gpu) + 1
        fix = f"use --tp {min([d for d in tp_degrees(model) if d >= need], default=need)} or more"
    raise SchedkitError(
        f"{model.name} needs ~{model.weight_bytes / 1e9:.0f} GB of weights; {gpu.name} x tp={tp}"
        f" has {usable} at utilisation {gpu_memory_utilization}: {fix}"
    )


BUILTIN_GPUS = (
    GPUProfile("A100-80GB", tflops=312.0, mem_bw_gbs=2039.0, mem_gb=80.0),
    GPUProfile("H100-SXM", tflops=989.0, mem_bw_gbs=3350.0, mem_gb=80.0),
    GPUProfile("H200", tflops=989.0, mem_bw_gbs=4800.0, mem_gb=141.0),
)
BUILTIN_MODELS = (
    ModelProfile("Llama-3-8B", 32, 4096, 32, 8, 128, 128256, 14336),
    ModelProfile("Llama-3-70B", 80, 8192, 64, 8, 128, 128256, 28672),
    ModelProfile("Qwen2.5-7B", 28, 3584, 28, 4, 128, 152064, 18944),
    ModelProfile("Qwen2.5-14B", 48, 5120, 40, 8, 128, 152064, 13824),
)
BUILTIN_GPU_ALIASES = {"H100": "H100-SXM", "A100": "A100-80GB"}
FORM_FACTORS = ("pcie", "nvl")  # words of a CUDA device name that mean another board


def _words(name: str) -> list[str]:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``["nvidia", "a100", "sxm4", "80gb"]``."""
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def _memory_word(words: list[str]) -> str | None:
    return next((w for w in words if re.fullmatch(r"\d+gb", w)), None)


def _model_dir(name: str) -> str | None:
    """The resolved directory ``name`` points at, when it is a model directory."""
    path = Path(name).expanduser()
    return str(path.resolve()) if (path / "config.json").is_file() else None


def _dirs(model: ModelProfile) -> tuple[str | None, str | None]:
    """The model directory ``model`` is named after, and the one its config.json is in."""
    return _model_dir(model.name), str(Path(model.source).parent) if model.source else None


class _GPUEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    tflops: float = Field(gt=0, allow_inf_nan=False)
    mem_bw_gbs: float = Field(gt=0, allow_inf_nan=False)
    mem_gb: float = Field(gt=0, allow_inf_nan=False)


class _ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    dtype_bytes: int = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _check_heads(self) -> _ModelEntry:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of"
                f" num_kv_heads ({self.num_kv_heads})"
            )
        return self


class _ProfileFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: list[_GPUEntry] = Field(default_factory=list)
    model: list[_ModelEntry] = Field(default_factory=list)


class ProfileRegistry:
    """GPU and model profiles by case-insensitive name; aliases map to GPU names."""

    def __init__(self) -> None:
        self._gpus: dict[str, GPUProfile] = {}
        self._models: dict[str, ModelProfile] = {}
        self._gpu_aliases: dict[str, str] = {}

    @classmethod
    def with_builtins(cls) -> ProfileRegistry:
        registry = cls()
        for gpu in BUILTIN_GPUS:
            registry.register_gpu(gpu)
        for model in BUILTIN_MODELS:
            registry.register_model(model)
        for alias, target in BUILTIN_GPU_ALIASES.items():
            registry._gpu_aliases[alias.lower()] = target.lower()
        return registry

    def gpu_names(self) -> list[str]:
        return sorted(g.name for g in self._gpus.values())

    def model_names(self) -> list[str]:
        return sorted(m.name for m in self._models.values())

    def get_gpu(self, name: str) -> GPUProfile:
        key = self._gpu_aliases.get(name.lower(), name.lower())
        if key not in self._gpus:
            raise SchedkitError(
                f"unknown GPU {quote(name)}; known GPUs: {', '.join(self.gpu_names())}."
                " Pick one of these or load a profile file with a [[gpu]] table."
            )
        return self._gpus[key]

    def get_model(self, name: str) -> ModelProfile:
        """The profile named ``name``, else the one read from the local model folder or
        ``config.json`` that ``name`` is the path of."""
        if name.lower() in self._models:
            return self._models[name.lower()]
        config_file = find_config_file(name)
        if config_file is None:
            named = sorted(m.name for m in self._models.values() if not m.source)
            where = "no such file or folder; " if looks_like_path(name) else ""
            raise SchedkitError(
                f"unknown model {quote(name)}: {where}give a model profile ({', '.join(named)})"
                " or --model PATH to a local Hugging Face model folder or its config.json"
                " (nothing is downloaded); a --profile file's [[model]] table adds a profile"
            )
        return model_from_config(name, config_file)

    def gpu_for_device(self, device: str) -> GPUProfile | None:
        """The GPU profile for a CUDA device name (``torch.cuda.get_device_name``), e.g.
        H100-SXM for ``NVIDIA H100 80GB HBM3``: the profile named so, else the one whose
        first name-word is a word of the device's and that agrees with it on the board
        (PCIe, NVL) and on the memory size where both name one; None when no profile or
        more than one fits."""
        key = self._gpu_aliases.get(device.lower(), device.lower())
        if key in self._gpus:
            return self._gpus[key]
        words = _words(device)
        board = {w for w in words if w in FORM_FACTORS}
        memory = _memory_word(words)
        fits = []
        for gpu in self._gpus.values():
            own = _words(gpu.name)
            own_memory = _memory_word(own)
            if (
                own
                and own[0] in words
                and {w for w in own if w in FORM_FACTORS} == board
                and (memory is None or own_memory is None or memory == own_memory)
            ):
                fits.append(gpu)
        return fits[0] if len(fits) == 1 else None

    def model_for_engine_name(self, name: str) -> ModelProfile | None:
        """The model profile for the model as an engine names it (a Hugging Face id or a
        local directory): the profile named so, else the one registered for the same
        directory, else the one whose name's words run through the id's last component
        (Llama-3-8B for ``meta-llama/Meta-Llama-3-8B-Instruct``); None when no profile or
        more than one fits."""
        if name.lower() in self._models:
            return self._models[name.lower()]
        directory = _model_dir(name)
        if directory is not None:
            same = [m for m in self._models.values() if directory in _dirs(m)]
            if len({m.source or m.name for m in same}) == 1:
                return same[0]
        words = _words(name.rstrip("/").rsplit("/", 1)[-1])
        fits = []
        for model in self._models.values():
            own = _words(model.name)
            runs = (words[i : i + len(own)] for i in range(len(words) - len(own) + 1))
            if own and any(run == own for run in runs):
                fits.append(model)
        return fits[0] if len(fits) == 1 else None

    def register_gpu(self, gpu: GPUProfile) -> None:
        """Add ``gpu``; re-registering an identical profile is a no-op."""
        key = gpu.name.lower()
        clash = self._gpus.get(key)
        if key in self._gpu_aliases or (clash is not None and clash != gpu):
            raise SchedkitError(f"GPU {quote(gpu.name)} is already defined differently; rename it")
        self._gpus[key] = gpu

    def register_model(self, model: ModelProfile) -> None:
        """Add ``model``; re-registering an identical profile is a no-op."""
        clash = self._models.get(model.name.lower())
        if clash is not None and clash != model:
            raise SchedkitError(
                f"model {quote(model.name)} is already defined differently; rename it"
            )
        self._models[model.name.lower()] = model

    def load_file(self, path: str | Path) -> None:
        """Validate every profile in a TOML/JSON file, then register them all."""
        path = Path(path)
        data = _read_profile_data(path)
        try:
            parsed = _ProfileFile.model_validate(data)
        except ValidationError as exc:
            raise SchedkitError(f"invalid profile file {path}: {_describe(exc)}") from exc
        gpus = [GPUProfile(**entry.model_dump()) for entry in parsed.gpu]
        models = [ModelProfile(**entry.model_dump()) for entry in parsed.model]
        # Check every clash before registering anything, so a bad file changes nothing.
        trial = ProfileRegistry()
        trial._gpus, trial._models = dict(self._gpus), dict(self._models)
        trial._gpu_aliases = dict(self._gpu_aliases)
        try:
            for gpu in gpus:
                trial.register_gpu(gpu)
            for model in models:
                trial.register_model(model)
        except SchedkitError as exc:
            raise SchedkitError(f"profile file {path}: {exc}") from exc
        self._gpus, self._models = trial._gpus, trial._models


def _read_profile_data(path: Path) -> Any:
    if path.suffix not in (".toml", ".json"):
        raise SchedkitError(f"profile file {path} must end in .toml or .json")
    text = read_document(path, "profile file", "a TOML or JSON file of [[gpu]] / [[model]] tables")
    try:
        return parse_document(text, "toml" if path.suffix == ".toml" else "json")
    except ValueError as exc:
        raise SchedkitError(f"profile file {path} is not valid {path.suffix[1:]}: {exc}") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        parts.append(f"{loc or '(top level)'}: {err['msg']}")
    return "; ".join(parts)


DEFAULT_REGISTRY = ProfileRegistry.with_builtins()


def get_gpu(name: str) -> GPUProfile:
    return DEFAULT_REGISTRY.get_gpu(name)


def get_model(name: str) -> ModelProfile:
    return DEFAULT_REGISTRY.get_model(name)


def gpu_for_device(device: str) -> GPUProfile | None:
    return DEFAULT_REGISTRY.gpu_for_device(device)


def model_for_engine_name(name: str) -> ModelProfile | None:
    return DEFAULT_REGISTRY.model_for_engine_name(name)


def load_profile_file(path: str | Path) -> None:
    """Register the ``[[gpu]]`` / ``[[model]]`` profiles in ``path`` with the default registry."""
    DEFAULT_REGISTRY.load_file(path)


def register_model_dir(name: str) -> str | None:
    """Register the model a local Hugging Face model folder or ``config.json`` holds
    (``--model PATH``), read from its ``config.json``, under ``name``.

    Real engines take a model path; the cost model and KV sizing then use its shape.
    Returns ``name``, or None when no file or folder ``name`` exists or the folder has no
    ``config.json``; raises :class:`SchedkitError` when the config gives no shape.
    """
    try:
        config_file = find_config_file(name)
    except SchedkitError:
        return None  # a folder without config.json: get_model says so where one is needed
    if config_file is None:
        return None
    DEFAULT_REGISTRY.register_model(model_from_config(name, config_file))
    return name


def __getattr__(name: str) -> object:
    """``profile_dict``, which nothing used, is gone (issue #36): it was
    ``dataclasses.asdict``, which the old name still gives."""
    if name == "profile_dict":
        import warnings

        warnings.warn(
            "schedkit.sim.cost.profiles.profile_dict is deprecated; use dataclasses.asdict(profile)"
            " (the old name goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return asdict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
