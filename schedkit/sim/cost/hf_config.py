"""A decoder's shape read from a local Hugging Face ``config.json`` (``--model PATH``).

The keys are those ``transformers`` writes for each architecture: Llama, Mistral, Qwen2 and
Qwen3 (dense); Mixtral (``num_local_experts``); Qwen2-MoE and Qwen3-MoE (``num_experts``,
``moe_intermediate_size``, ``shared_expert_intermediate_size``, ``mlp_only_layers``,
``decoder_sparse_step``); DeepSeek-V2/V3 and GLM-4.5 (``n_routed_experts``,
``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``, and DeepSeek's
multi-head latent attention, ``kv_lora_rank``); OPT (``ffn_dim``, a plain MLP, tied
embeddings); a multimodal model's decoder under ``text_config``. Only files on this machine are read: nothing is downloaded. A shape that
cannot be read (a key missing, a count that is not positive, heads that do not split the
hidden size) is refused with a :class:`SchedkitError` naming the file and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedkit.errors import SchedkitError, quote
from schedkit.inputs import parse_document, read_document
from schedkit.sim.cost.shape import CONFIG_NAME, ModelProfile

REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)
# Bytes per element of the dtype an engine serves a checkpoint in: vLLM's and SGLang's
# --dtype auto run a float32 checkpoint in float16.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}
ASSUMED_DTYPE = "bfloat16"  # when the config names none, as vLLM assumes
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


@dataclass(frozen=True)
class _Family:
    """What an architecture's config leaves unsaid: the key of its MLP's width, whether
    the MLP is gated, and whether its embeddings are tied when the config does not say."""

    mlp_key: str = "intermediate_size"
    mlp_gated: bool = True
    tied: bool = False


# By model_type; any other is read as Llama's. OPT: fc1/fc2 with ReLU, lm_head tied.
FAMILIES = {"opt": _Family(mlp_key="ffn_dim", mlp_gated=False, tied=True)}
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk")
MLA_KEYS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is written as a path (a separator, ``~``, ``.``, ``.json``) rather
    than as a profile's name."""
    return (
        "/" in name
        or os.sep in name
        or name.startswith(("~", "."))
        or name.lower().endswith(".json")
    )


def find_config_file(name: str) -> Path | None:
    """The ``config.json`` that ``name`` points at: a folder's, or the file itself.

    None when no file or folder of that name exists; a :class:`SchedkitError` for a folder
    without a ``config.json``.
    """
    path = Path(name).expanduser()
    try:
        if path.is_file():
            return path
        if not path.is_dir():
            return None
        if (path / CONFIG_NAME).is_file():
            return path / CONFIG_NAME
    except OSError:  # e.g. a name too long for a path
        return None
    raise SchedkitError(
        f"model folder {quote(name)} has no {CONFIG_NAME}: --model PATH takes a local Hugging"
        f" Face model folder (the one holding {CONFIG_NAME}) or the {CONFIG_NAME} itself"
    )


def model_from_config(name: str, config_file: Path) -> ModelProfile:
    """The profile of the decoder ``config_file`` describes (its ``text_config``'s, when
    it has one) as the engines would run it, named ``name`` (the path as given), with the
    file as its ``source``."""
    where = f"model config {config_file}"
    text = read_document(config_file, "model config", f"a Hugging Face {CONFIG_NAME}")
    try:
        data = parse_document(text, "json")
    except ValueError as exc:
        raise SchedkitError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SchedkitError(f"{where} holds {type(data).__name__}, not a JSON object of keys")
    return _Keys(data, where).profile(name, str(config_file.resolve()))


@dataclass(frozen=True)
class _Attention:
    heads: int
    kv_heads: int
    head_dim: int
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0


class _Keys:
    """A config's keys, its ``text_config``'s first (those of a multimodal model's
    decoder); errors name the file and the key as written there."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        text = data.get("text_config")
        self.top, self.where = data, where
        self.nested = isinstance(text, dict)
        self.text: dict[str, Any] = text if isinstance(text, dict) else data
        self.family = FAMILIES.get(str(self.text.get("model_type")), _Family())

    def spelled(self, key: str) -> str:
        return f"text_config.{key}" if self.nested else key

    def get(self, key: str, *, inherit: bool = False) -> Any:
        """The value of ``key`` (None when absent or null); ``inherit``: else the top
        level's (dtype, tied embeddings and quantization are often written only there)."""
        value = self.text.get(key)
        return self.top.get(key) if value is None and inherit else value

    def count(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """``key``'s integer value, at least ``minimum``; ``default`` when it is absent."""
        value = self.get(key)
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            least = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise SchedkitError(f"{self.where}: {self.spelled(key)} must be {least}, got {value!r}")
        return value

    def first(self, keys: tuple[str, ...]) -> str | None:
        """The first of ``keys`` the config gives a value."""
        return next((key for key in keys if self.get(key) is not None), None)

    def fail(self, message: str) -> SchedkitError:
        return SchedkitError(f"{self.where}: {message}")

    def profile(self, name: str, source: str) -> ModelProfile:
        mlp = self.family.mlp_key
        required = tuple(mlp if key == "intermediate_size" else key for key in REQUIRED_KEYS)
        missing = [key for key in required if self.get(key) is None]
        if missing:
            raise self.fail(
                f"no {', '.join(map(self.spelled, missing))}: the cost model sizes a model"
                f" by {', '.join(required)} (a multimodal model's under text_config);"
                " give the folder of a model whose config names them"
            )
        projected = self.get("word_embed_proj_dim")
        if projected is not None and projected != self.get("hidden_size"):
            raise self.fail(
                f"{self.spelled('word_embed_proj_dim')} ({projected}) differs from"
                f" {self.spelled('hidden_size')}: the projections between them are not sized"
            )
        layers = self.count("num_hidden_layers")
        experts, top_k, expert_size, shared, dense = self.experts(layers)
        attention = self.attention()
        dtype_bytes = self.dtype_bytes()
        return ModelProfile(
            name=name,
            num_layers=layers,
            hidden_size=self.count("hidden_size"),
            num_heads=attention.heads,
            num_kv_heads=attention.kv_heads,
            head_dim=attention.head_dim,
            vocab_size=self.count("vocab_size"),
            intermediate_size=self.count(mlp),
            dtype_bytes=dtype_bytes,
            weight_bits=self.weight_bits(dtype_bytes),
            tie_word_embeddings=self.tied(),
            mlp_gated=self.family.mlp_gated,
            num_experts=experts,
            experts_per_token=top_k,
            moe_intermediate_size=expert_size,
            shared_expert_intermediate_size=shared,
            num_dense_layers=dense,
            kv_lora_rank=attention.kv_lora_rank,
            q_lora_rank=attention.q_lora_rank,
            qk_rope_head_dim=attention.qk_rope_head_dim,
            v_head_dim=attention.v_head_dim,
            source=source,
        )

    def attention(self) -> _Attention:
        """Heads, KV heads and head dims; an MLA model caches one latent per token and
        layer, which every tensor-parallel GPU holds whole: one KV head."""
        hidden, heads = self.count("hidden_size"), self.count("num_attention_heads")
        if self.get("kv_lora_rank") is not None:
            missing = [self.spelled(key) for key in MLA_KEYS if self.get(key) is None]
            if missing:
                raise self.fail(f"kv_lora_rank (latent attention) needs {', '.join(missing)}")
            rope = self.count("qk_rope_head_dim")
            return _Attention(
                heads,
                kv_heads=1,
                head_dim=self.count("qk_nope_head_dim") + rope,  # not head_dim: rope's
                kv_lora_rank=self.count("kv_lora_rank"),
                q_lora_rank=self.count("q_lora_rank", default=0, minimum=0),
                qk_rope_head_dim=rope,
                v_head_dim=self.count("v_head_dim"),
            )
        kv_heads = self.count("num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise self.fail(
                f"{self.spelled('num_attention_heads')} ({heads}) is not a multiple of"
                f" {self.spelled('num_key_value_heads')} ({kv_heads})"
            )
        if self.get("head_dim") is None and hidden % heads:
            raise self.fail(
                f"{self.spelled('hidden_size')} ({hidden}) is not a multiple of"
                f" {self.spelled('num_attention_heads')} ({heads}) and no head_dim is given"
            )
        return _Attention(heads, kv_heads, self.count("head_dim", default=hidden // heads))

    def experts(self, layers: int) -> tuple[int, int, int, int, int]:
        """(routed experts, experts per token, expert size, shared expert size, dense
        layers); all 0 for a dense model."""
        key = self.first(EXPERT_KEYS)
        if key is None or not (experts := self.count(key, minimum=0)):
            return 0, 0, 0, 0, 0
        top_key = self.first(TOP_K_KEYS)
        if top_key is None:
            raise self.fail(
                f"{self.spelled(key)} ({experts} experts) needs"
                f" {self.spelled(TOP_K_KEYS[0])}, the experts each token runs through"
            )
        top_k = self.count(top_key)
        if top_k > experts:
            raise self.fail(f"{self.spelled(top_key)} ({top_k}) is more than {experts} experts")
        size = self.count("moe_intermediate_size", default=self.count("intermediate_size"))
        shared = self.count("n_shared_experts", default=0, minimum=0) * size
        shared += self.count("shared_expert_intermediate_size", default=0, minimum=0)
        return experts, top_k, size, shared, layers - self.moe_layers(layers)

    def moe_layers(self, layers: int) -> int:
        """How many layers run the experts, as each architecture places them: from
        ``first_k_dense_replace`` every ``moe_layer_freq``-th (DeepSeek, GLM), every
        ``decoder_sparse_step``-th but ``mlp_only_layers`` (Qwen MoE), else all."""
        first = self.count("first_k_dense_replace", default=0, minimum=0)
        every = self.count("moe_layer_freq", default=1)
        step = self.count("decoder_sparse_step", default=1)
        dense = self.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in dense
        ):
            raise self.fail(f"{self.spelled('mlp_only_layers')} must be a list of layer indices")
        return sum(
            1
            for i in range(layers)
            if i >= first and i % every == 0 and (i + 1) % step == 0 and i not in dense
        )

    def dtype_bytes(self) -> int:
        key = "dtype" if self.get("dtype", inherit=True) is not None else "torch_dtype"
        dtype = self.get(key, inherit=True)
        if dtype is None:
            return DTYPE_BYTES[ASSUMED_DTYPE]
        if dtype not in DTYPE_BYTES:
            raise self.fail(
                f"{key} {dtype!r} is none of {', '.join(DTYPE_BYTES)}, the dtypes an engine"
                " serves a checkpoint in"
            )
        return DTYPE_BYTES[dtype]

    def tied(self) -> bool:
        value = self.get("tie_word_embeddings", inherit=True)
        if value is None:
            return self.family.tied  # transformers' default for the architecture
        if not isinstance(value, bool):
            raise self.fail(f"tie_word_embeddings must be true or false, got {value!r}")
        return value

    def weight_bits(self, dtype_bytes: int) -> int:
        """Bits per quantized weight (``quantization_config``); 0 when not quantized."""
        config = self.get("quantization_config", inherit=True)
        if config is None:
            return 0
        method = config.get("quant_method") if isinstance(config, dict) else None
        bits = _quantized_bits(config) if isinstance(config, dict) else None
        if bits is None or not 0 < bits < 8 * dtype_bytes:
            raise self.fail(
                f"quantization_config (quant_method {method!r}) names no bits per weight the"
                " cost model can size (bits, fp8, compressed-tensors' num_bits, bitsandbytes'"
                " load_in_4bit/8bit); bench the unquantized model's folder"
            )
        return bits


def _quantized_bits(config: dict[str, Any]) -> int | None:
    """Bits per weight a ``quantization_config`` names: GPTQ's and AWQ's ``bits``, FP8's
    8, bitsandbytes' 4 or 8, the one ``num_bits`` of every compressed-tensors group."""
    bits = config.get("bits", config.get("w_bit"))
    if isinstance(bits, int) and not isinstance(bits, bool):
        return bits
    method = config.get("quant_method")
    if method == "fp8":
        return 8
    if method == "bitsandbytes":
        return 4 if config.get("load_in_4bit") else 8 if config.get("load_in_8bit") else None
    groups = config.get("config_groups")
    if method == "compressed-tensors" and isinstance(groups, dict):
        weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)]
        found = {w.get("num_bits") for w in weights if isinstance(w, dict)}
        only = found.pop() if len(found) == 1 else None
        return only if isinstance(only, int) and not isinstance(only, bool) else None
    return None
