"""A decoder's shape, and the parameters, weight bytes and KV bytes per token that follow.

The cost model (:mod:`schedkit.sim.cost.model`) reads a model only through these: FLOPs
from ``active_params``, memory from ``weight_bytes`` and ``kv_bytes_per_token``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class ModelProfile:
    """A decoder: GQA attention (or DeepSeek's multi-head latent attention, MLA), a gated
    MLP in every layer (a plain one, up and down, where not ``mlp_gated``: OPT's; or, with
    ``num_experts``, a mixture of gated-MLP experts in all but ``num_dense_layers``),
    RMSNorms, embeddings untied unless ``tie_word_embeddings``.

    The built-ins and a profile file give the Llama-style fields; a model folder's
    ``config.json`` (``--model PATH``, :mod:`schedkit.sim.cost.hf_config`) gives them all.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    dtype_bytes: int = 2
    kv_dtype_bytes: int = 0  # the KV cache's element size (vLLM --kv-cache-dtype); 0: dtype's
    weight_bits: int = 0  # quantized linear weights' bits (GPTQ/AWQ 4, FP8 8); 0: dtype's
    tie_word_embeddings: bool = False
    mlp_gated: bool = True  # gate and up projections (SwiGLU); False: up only (OPT's fc1)
    num_experts: int = 0  # routed experts of a MoE layer; 0: a dense MLP in every layer
    experts_per_token: int = 0
    moe_intermediate_size: int = 0  # each expert's; 0: intermediate_size
    shared_expert_intermediate_size: int = 0  # the MLP every token also runs in a MoE layer
    num_dense_layers: int = 0  # a MoE model's layers with a dense MLP (intermediate_size)
    kv_lora_rank: int = 0  # MLA: the latent each token caches per layer; 0: per-head K and V
    q_lora_rank: int = 0  # MLA: the query's low-rank projection; 0: a full one
    qk_rope_head_dim: int = 0  # MLA: the rotary part of head_dim, cached beside the latent
    v_head_dim: int = 0  # MLA: a value head's size; 0: head_dim
    source: str = ""  # the config.json the shape was read from; "" for a named profile

    @property
    def num_params(self) -> int:
        """Parameter count: embeddings + lm_head (one matrix when tied) + per-layer
        attention, MLP (every expert) and norms. Biases are left out."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """The parameters one token runs through: of a MoE layer's routed experts, only
        ``experts_per_token``. ``num_params`` for a dense model."""
        return self._params(self.experts_per_token)

    def _params(self, experts: int) -> int:
        h = self.hidden_size
        dense_mlp = (3 if self.mlp_gated else 2) * h * self.intermediate_size
        dense_layers, moe_mlp = self.num_layers, 0
        if self.num_experts:
            expert = 3 * h * (self.moe_intermediate_size or self.intermediate_size)
            shared = 3 * h * self.shared_expert_intermediate_size
            moe_mlp = experts * expert + shared + h * self.num_experts  # + the router
            dense_layers = self.num_dense_layers
        mlps = dense_layers * dense_mlp + (self.num_layers - dense_layers) * moe_mlp
        per_layer = self._attention_params() + 2 * h  # two RMSNorm weight vectors
        embeddings = (1 if self.tie_word_embeddings else 2) * self.vocab_size * h
        return embeddings + self.num_layers * per_layer + mlps + h  # + final norm

    def _attention_params(self) -> int:
        h, heads = self.hidden_size, self.num_heads
        q_out = heads * self.head_dim
        if not self.kv_lora_rank:
            kv_out = self.num_kv_heads * self.head_dim
            return h * q_out + 2 * h * kv_out + q_out * h
        rope, v, q_rank, kv_rank = (
            self.qk_rope_head_dim,
            self.v_head_dim or self.head_dim,
            self.q_lora_rank,
            self.kv_lora_rank,
        )
        query = h * q_rank + q_rank + q_rank * q_out if q_rank else h * q_out  # + its norm
        latent = h * (kv_rank + rope) + kv_rank + kv_rank * heads * (self.head_dim - rope + v)
        return query + latent + heads * v * h

    @property
    def weight_bytes(self) -> int:
        """Every parameter at ``dtype_bytes``; with quantized weights, the embeddings (and
        lm_head) at ``dtype_bytes`` and the rest at ``weight_bits``."""
        if not self.weight_bits:
            return self.num_params * self.dtype_bytes
        embeddings = (1 if self.tie_word_embeddings else 2) * self.vocab_size * self.hidden_size
        rest = self.num_params - embeddings
        return embeddings * self.dtype_bytes + rest * self.weight_bits // 8

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head; with MLA, each layer's latent and rotary key."""
        element = self.kv_dtype_bytes or self.dtype_bytes
        if self.kv_lora_rank:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * element
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element

    @property
    def label(self) -> str:
        """How reports name the model: the profile's name; for one read from a
        ``config.json``, its folder's name."""
        if not self.source:
            return self.name
        path = Path(self.source)
        return path.parent.name if path.name == CONFIG_NAME and path.parent.name else path.stem

    def figures(self) -> dict[str, Any]:
        """What the report states of a profile read from a ``config.json``: the file (its
        folder's name and its own), the shape and the counts that follow from it."""
        path = Path(self.source)
        out: dict[str, Any] = {
            "source": f"{path.parent.name}/{path.name}" if path.parent.name else path.name,
            "layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "heads": self.num_heads,
            "kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "bytes_per_param": self.dtype_bytes,
            "tied_embeddings": self.tie_word_embeddings,
        }
        if not self.mlp_gated:
            out["mlp_gated"] = False
        if self.weight_bits:
            out["weight_bits"] = self.weight_bits
        if self.kv_lora_rank:
            out["kv_lora_rank"] = self.kv_lora_rank
        if self.num_experts:
            out["experts"] = self.num_experts
            out["experts_per_token"] = self.experts_per_token
            out["moe_intermediate_size"] = self.moe_intermediate_size
            out["dense_layers"] = self.num_dense_layers
            out["active_params_b"] = round(self.active_params / 1e9, 2)
        out["params_b"] = round(self.num_params / 1e9, 2)
        out["kv_bytes_per_token"] = self.kv_bytes_per_token
        return out
