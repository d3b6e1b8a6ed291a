"""Model profiles read from a local Hugging Face config.json (``--model PATH``): the keys
real configs use, the built-in profile where one exists for the same model, published
parameter counts where none does, and one clear error for each bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from schedkit.errors import SchedkitError
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import (
    ModelProfile,
    ProfileRegistry,
    get_gpu,
    get_model,
    model_for_engine_name,
    register_model_dir,
    tp_degrees,
)

# The keys of the models' published config.json files (the ones the cost model reads, plus
# some of the rest, which it must ignore).
LLAMA_3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
LLAMA_3_70B = {
    **LLAMA_3_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}
QWEN2_5_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}
QWEN2_5_14B = {
    **QWEN2_5_7B,
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
}
QWEN2_5_0_5B = {  # ties its embeddings
    **QWEN2_5_7B,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}
MIXTRAL_8X7B: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}
QWEN3_30B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}
QWEN1_5_MOE_A2_7B = {  # a shared expert beside the routed ones
    **QWEN3_30B_A3B,
    "architectures": ["Qwen2MoeForCausalLM"],
    "head_dim": None,
    "intermediate_size": 5632,
    "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632,
}
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "tie_word_embeddings": False,
    "topk_group": 4,
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}
DEEPSEEK_V2_LITE = {  # no query compression, two shared experts
    **DEEPSEEK_V3,
    "first_k_dense_replace": 1,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "quantization_config": None,
    "vocab_size": 102400,
}
GLM_4_5_AIR: dict[str, Any] = {  # DeepSeek-style experts with GQA attention
    "architectures": ["Glm4MoeForCausalLM"],
    "first_k_dense_replace": 1,
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 10944,
    "model_type": "glm4_moe",
    "moe_intermediate_size": 1408,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_attention_heads": 96,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 46,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151552,
}
OPT_13B: dict[str, Any] = {  # facebook/opt-13b: MHA, fc1/fc2 with ReLU, lm_head tied
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "do_layer_norm_before": True,
    "ffn_dim": 20480,
    "hidden_size": 5120,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 40,
    "num_hidden_layers": 40,
    "torch_dtype": "float16",
    "vocab_size": 50272,
    "word_embed_proj_dim": 5120,
}
OPT_66B = {
    **OPT_13B,
    "ffn_dim": 36864,
    "hidden_size": 9216,
    "num_attention_heads": 72,
    "num_hidden_layers": 64,
    "word_embed_proj_dim": 9216,
}
VISION = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16}


def model_dir(tmp_path: Path, name: str, config: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    text = config if isinstance(config, str) else json.dumps(config)
    (folder / "config.json").write_text(text)
    return folder


def derived(tmp_path: Path, name: str, config: Any) -> ModelProfile:
    return ProfileRegistry().get_model(str(model_dir(tmp_path, name, config)))


def as_builtin(model: ModelProfile, name: str) -> ModelProfile:
    return dataclasses.replace(model, name=name, source="")


@pytest.mark.parametrize(
    ("builtin", "config"),
    [
        ("Llama-3-8B", LLAMA_3_8B),
        ("Llama-3-70B", LLAMA_3_70B),
        ("Qwen2.5-7B", QWEN2_5_7B),
        ("Qwen2.5-14B", QWEN2_5_14B),
    ],
)
def test_a_config_of_a_builtin_model_gives_the_builtin_profile(
    tmp_path: Path, builtin: str, config: dict[str, Any]
) -> None:
    model = derived(tmp_path, builtin, config)
    assert as_builtin(model, builtin) == get_model(builtin)
    assert model.num_params == get_model(builtin).num_params
    assert model.kv_bytes_per_token == get_model(builtin).kv_bytes_per_token
    assert model.label == builtin and model.source == str(tmp_path / builtin / "config.json")


def test_a_multimodal_models_decoder_is_read_from_text_config(tmp_path: Path) -> None:
    text = {k: v for k, v in LLAMA_3_8B.items() if k != "torch_dtype"}  # dtype: top level's
    llava = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "hidden_size": 1024,  # not the decoder's: must not be read
        "text_config": text,
        "vision_config": VISION,
        "torch_dtype": "float16",
    }
    model = derived(tmp_path, "llava", llava)
    assert as_builtin(model, "Llama-3-8B") == get_model("Llama-3-8B")


def test_a_given_head_dim_wins_over_hidden_size_by_heads(tmp_path: Path) -> None:
    mistral3 = {  # Mistral-Small-3.1: 5120 / 32 heads would be 160
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": {
            "head_dim": 128,
            "hidden_size": 5120,
            "intermediate_size": 32768,
            "model_type": "mistral",
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "vocab_size": 131072,
        },
        "vision_config": VISION,
        "torch_dtype": "bfloat16",
    }
    model = derived(tmp_path, "mistral3", mistral3)
    assert model.head_dim == 128
    assert model.kv_bytes_per_token == 2 * 40 * 8 * 128 * 2
    assert model.num_params == pytest.approx(23.6e9, rel=0.01)  # 24B with its vision tower


def test_tied_embeddings_are_counted_once(tmp_path: Path) -> None:
    tied = derived(tmp_path, "Qwen2.5-0.5B", QWEN2_5_0_5B)
    untied = dataclasses.replace(tied, tie_word_embeddings=False)
    assert tied.tie_word_embeddings
    assert untied.num_params - tied.num_params == 151936 * 896
    assert tied.num_params == pytest.approx(0.494e9, rel=0.005)  # published: 0.49B
    assert tied.weight_bytes == 2 * tied.num_params


@pytest.mark.parametrize(
    ("name", "config", "total"), [("OPT-13B", OPT_13B, 12.85e9), ("OPT-66B", OPT_66B, 65.7e9)]
)
def test_opt_has_a_plain_mlp_and_tied_embeddings(
    tmp_path: Path, name: str, config: dict[str, Any], total: float
) -> None:
    # Published totals (OPT paper, Table 1); biases and learned positions are left out.
    model = derived(tmp_path, name, config)
    assert not model.mlp_gated and model.tie_word_embeddings
    assert model.intermediate_size == config["ffn_dim"]
    assert model.num_params == pytest.approx(total, rel=0.005)
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    assert model.kv_bytes_per_token == 2 * layers * h * 2  # MHA: every head cached
    gated = dataclasses.replace(model, mlp_gated=True)
    assert gated.num_params - model.num_params == layers * h * config["ffn_dim"]
    assert model.figures()["mlp_gated"] is False
    assert "mlp_gated" not in gated.figures()


@pytest.mark.parametrize(
    ("name", "config", "total", "active"),
    [
        ("Mixtral-8x7B", MIXTRAL_8X7B, 46.7e9, 12.9e9),
        ("Qwen3-30B-A3B", QWEN3_30B_A3B, 30.5e9, 3.3e9),
        ("Qwen1.5-MoE-A2.7B", QWEN1_5_MOE_A2_7B, 14.3e9, 2.7e9),
        ("DeepSeek-V3", DEEPSEEK_V3, 671e9, 37e9),
        ("DeepSeek-V2-Lite", DEEPSEEK_V2_LITE, 15.7e9, 2.66e9),
        ("GLM-4.5-Air", GLM_4_5_AIR, 106.9e9, 13.4e9),
    ],
)
def test_a_moe_model_counts_every_expert_and_runs_its_top_k(
    tmp_path: Path, name: str, config: dict[str, Any], total: float, active: float
) -> None:
    # Published totals; published active counts leave out some embeddings (DeepSeek-V2-Lite
    # 2.4B, GLM-4.5-Air 12B): those here count both embedding matrices, as the built-ins do.
    model = derived(tmp_path, name, config)
    assert model.num_params == pytest.approx(total, rel=0.02)
    assert model.active_params == pytest.approx(active, rel=0.02)
    dense = dataclasses.replace(model, experts_per_token=model.num_experts)
    assert dense.active_params == model.num_params > model.active_params


def test_the_roofline_computes_with_active_parameters_and_reads_every_expert(
    tmp_path: Path,
) -> None:
    mixtral = derived(tmp_path, "mixtral", MIXTRAL_8X7B)
    cost = RooflineCostModel(mixtral, get_gpu("H100"), tp=2)
    flops_per_s = 2 * 989e12 * 0.7
    assert cost.linear_coefficients()["c_prefill"] == pytest.approx(
        2 * mixtral.active_params / flops_per_s
    )
    compute, memory = cost.roofline_times(0, 1, 0, 0)
    assert memory == pytest.approx(mixtral.weight_bytes / (2 * 3350e9 * 0.85))
    assert compute == pytest.approx(2 * mixtral.active_params / flops_per_s)


def test_moe_layers_follow_each_architectures_placement(tmp_path: Path) -> None:
    assert derived(tmp_path, "v3", DEEPSEEK_V3).num_dense_layers == 3
    every_other = {**DEEPSEEK_V3, "moe_layer_freq": 2}  # MoE at layers 4, 6, ..., 60
    assert derived(tmp_path, "freq", every_other).num_dense_layers == 61 - 29
    qwen = {**QWEN3_30B_A3B, "decoder_sparse_step": 2, "mlp_only_layers": [1, 3, 47]}
    assert derived(tmp_path, "qwen", qwen).num_dense_layers == 48 - 21  # odd ones but 1, 3, 47
    assert derived(tmp_path, "mixtral", MIXTRAL_8X7B).num_dense_layers == 0


def test_latent_attention_caches_one_latent_per_layer_on_every_gpu(tmp_path: Path) -> None:
    v3 = derived(tmp_path, "DeepSeek-V3", DEEPSEEK_V3)
    assert (v3.num_kv_heads, v3.head_dim, v3.v_head_dim) == (1, 192, 128)
    assert v3.kv_bytes_per_token == 61 * (512 + 64) * 2  # bfloat16, not its fp8 weights
    assert tp_degrees(v3) == [1, 2, 4, 8, 16, 32, 64, 128]  # the heads alone constrain tp
    resaved = {**DEEPSEEK_V3, "head_dim": 64}  # transformers writes head_dim = qk_rope_head_dim
    assert derived(tmp_path, "resaved", resaved) == dataclasses.replace(
        v3, name=str(tmp_path / "resaved"), source=str(tmp_path / "resaved" / "config.json")
    )


@pytest.mark.parametrize(
    ("quantization", "bits"),
    [
        ({"quant_method": "fp8"}, 8),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 4),
        ({"quant_method": "gptq", "bits": 8}, 8),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, 4),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            8,
        ),
    ],
)
def test_quantized_weights_are_sized_at_their_bits_and_embeddings_at_the_dtype(
    tmp_path: Path, quantization: dict[str, Any], bits: int
) -> None:
    model = derived(tmp_path, "q", {**LLAMA_3_8B, "quantization_config": quantization})
    embeddings = 2 * 128256 * 4096
    assert model.weight_bits == bits
    assert model.weight_bytes == embeddings * 2 + (model.num_params - embeddings) * bits // 8
    assert model.kv_bytes_per_token == get_model("Llama-3-8B").kv_bytes_per_token


@pytest.mark.parametrize(
    ("config", "dtype_bytes"),
    [
        ({**LLAMA_3_8B, "torch_dtype": "float16"}, 2),
        ({**LLAMA_3_8B, "torch_dtype": "float32"}, 2),  # engines serve it in float16
        ({k: v for k, v in LLAMA_3_8B.items() if k != "torch_dtype"} | {"dtype": "float16"}, 2),
        ({k: v for k, v in LLAMA_3_8B.items() if k != "torch_dtype"}, 2),  # bfloat16 assumed
    ],
)
def test_dtype_is_read_from_torch_dtype_or_dtype(
    tmp_path: Path, config: dict[str, Any], dtype_bytes: int
) -> None:
    assert derived(tmp_path, "m", config).dtype_bytes == dtype_bytes


def test_a_config_json_path_works_as_its_folder_does(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, "Meta-Llama-3-8B", LLAMA_3_8B)
    by_file = ProfileRegistry().get_model(str(folder / "config.json"))
    by_folder = ProfileRegistry().get_model(str(folder))
    assert by_file.label == by_folder.label == "Meta-Llama-3-8B"
    assert dataclasses.replace(by_file, name="x") == dataclasses.replace(by_folder, name="x")


def test_figures_state_the_source_and_the_counts(tmp_path: Path) -> None:
    llama = derived(tmp_path, "Meta-Llama-3-8B", LLAMA_3_8B)
    assert llama.figures() == {
        "source": "Meta-Llama-3-8B/config.json",
        "layers": 32,
        "hidden_size": 4096,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "bytes_per_param": 2,
        "tied_embeddings": False,
        "params_b": 8.03,
        "kv_bytes_per_token": 131072,
    }
    v3 = derived(tmp_path, "DeepSeek-V3", DEEPSEEK_V3).figures()
    assert (v3["experts"], v3["experts_per_token"], v3["dense_layers"]) == (256, 8, 3)
    assert (v3["weight_bits"], v3["kv_lora_rank"], v3["params_b"]) == (8, 512, 671.03)


def test_a_registered_model_folder_is_found_by_its_engine_name(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, "my-llama", LLAMA_3_8B)
    config = str(folder / "config.json")
    assert ProfileRegistry.with_builtins().model_for_engine_name(str(folder)) is None
    assert register_model_dir(config) == config
    found = model_for_engine_name(str(folder))  # as vLLM records --model DIR
    assert found is not None and found.name == config and found.label == "my-llama"
    assert register_model_dir(str(tmp_path / "missing")) is None
    (tmp_path / "empty").mkdir()
    assert register_model_dir(str(tmp_path / "empty")) is None


def test_an_unknown_name_names_the_profiles_and_the_path_option() -> None:
    with pytest.raises(SchedkitError) as info:
        ProfileRegistry.with_builtins().get_model("x")
    assert str(info.value) == (
        "unknown model 'x': give a model profile (Llama-3-70B, Llama-3-8B, Qwen2.5-14B,"
        " Qwen2.5-7B) or --model PATH to a local Hugging Face model folder or its config.json"
        " (nothing is downloaded); a --profile file's [[model]] table adds a profile"
    )


def test_a_path_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    with pytest.raises(SchedkitError) as info:
        ProfileRegistry.with_builtins().get_model(missing)
    assert str(info.value).startswith(f"unknown model '{missing}': no such file or folder;")
    assert "--model PATH to a local Hugging Face model folder" in str(info.value)
    with pytest.raises(SchedkitError, match="no such file or folder"):
        ProfileRegistry().get_model("meta-llama/Meta-Llama-3-8B")  # a hub id: not downloaded


def test_a_folder_without_config_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    with pytest.raises(SchedkitError) as info:
        ProfileRegistry().get_model(str(tmp_path / "weights"))
    assert str(info.value) == (
        f"model folder '{tmp_path / 'weights'}' has no config.json: --model PATH takes a local"
        " Hugging Face model folder (the one holding config.json) or the config.json itself"
    )


def _without(*keys: str) -> dict[str, Any]:
    return {k: v for k, v in LLAMA_3_8B.items() if k not in keys}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "is not valid JSON: Expecting property name"),
        ("[1, 2]", "holds list, not a JSON object of keys"),
        (
            _without("num_hidden_layers", "vocab_size"),
            ": no num_hidden_layers, vocab_size: the cost model sizes a model by"
            " num_hidden_layers, hidden_size, num_attention_heads, intermediate_size,"
            " vocab_size",
        ),
        (
            {"text_config": _without("hidden_size"), "torch_dtype": "bfloat16"},
            ": no text_config.hidden_size: the cost model sizes",
        ),
        (
            {**LLAMA_3_8B, "num_hidden_layers": 0},
            "num_hidden_layers must be a positive integer, got 0",
        ),
        ({**LLAMA_3_8B, "hidden_size": -4096}, "hidden_size must be a positive integer, got -4096"),
        (
            {**LLAMA_3_8B, "vocab_size": 1.5e5},
            "vocab_size must be a positive integer, got 150000.0",
        ),
        ({**LLAMA_3_8B, "num_key_value_heads": True}, "num_key_value_heads must be a positive"),
        (
            {**LLAMA_3_8B, "num_attention_heads": 24},
            "hidden_size (4096) is not a multiple of num_attention_heads (24) and no head_dim",
        ),
        (
            {**LLAMA_3_8B, "num_key_value_heads": 5},
            "num_attention_heads (32) is not a multiple of num_key_value_heads (5)",
        ),
        ({**LLAMA_3_8B, "head_dim": 0}, "head_dim must be a positive integer, got 0"),
        (
            {**MIXTRAL_8X7B, "num_experts_per_tok": None},
            "num_local_experts (8 experts) needs num_experts_per_tok",
        ),
        ({**MIXTRAL_8X7B, "num_experts_per_tok": 9}, "num_experts_per_tok (9) is more than 8"),
        ({**MIXTRAL_8X7B, "num_local_experts": -8}, "num_local_experts must be an integer >= 0"),
        (
            {k: v for k, v in DEEPSEEK_V3.items() if k != "v_head_dim"},
            "kv_lora_rank (latent attention) needs v_head_dim",
        ),
        ({**QWEN3_30B_A3B, "mlp_only_layers": "1,2"}, "mlp_only_layers must be a list"),
        ({**LLAMA_3_8B, "torch_dtype": "int8"}, "torch_dtype 'int8' is none of bfloat16,"),
        ({**LLAMA_3_8B, "tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        (
            {k: v for k, v in OPT_13B.items() if k != "ffn_dim"},
            ": no ffn_dim: the cost model sizes a model by num_hidden_layers, hidden_size,"
            " num_attention_heads, ffn_dim, vocab_size",
        ),
        (
            {**OPT_13B, "word_embed_proj_dim": 512},
            "word_embed_proj_dim (512) differs from hidden_size",
        ),
        (
            {**LLAMA_3_8B, "quantization_config": {"quant_method": "exl2"}},
            "quantization_config (quant_method 'exl2') names no bits per weight",
        ),
    ],
)
def test_a_bad_config_is_refused_naming_the_file_and_key(
    tmp_path: Path, config: Any, message: str
) -> None:
    folder = model_dir(tmp_path, "bad", config)
    with pytest.raises(SchedkitError) as info:
        ProfileRegistry().get_model(str(folder))
    text = str(info.value)
    assert text.startswith(f"model config {folder / 'config.json'}"), text
    assert message in text, text
