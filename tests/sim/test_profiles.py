from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedkit.errors import SchedkitError
from schedkit.sim.cost.profiles import (
    GPUProfile,
    ModelProfile,
    ProfileRegistry,
    get_gpu,
    get_model,
    kv_capacity_tokens,
)


def test_llama3_8b_parameter_count_and_kv_bytes() -> None:
    model = get_model("Llama-3-8B")
    assert model.num_params == pytest.approx(8.03e9, rel=0.01)
    assert model.kv_bytes_per_token == 131072
    assert model.weight_bytes == 2 * model.num_params


def test_llama3_70b_parameter_count() -> None:
    assert get_model("llama-3-70b").num_params == pytest.approx(70.55e9, rel=0.005)


@pytest.mark.parametrize(("name", "params"), [("Qwen2.5-7B", 7.6e9), ("Qwen2.5-14B", 14.7e9)])
def test_qwen_parameter_counts_are_close_to_published(name: str, params: float) -> None:
    # Published counts include small qkv biases that a Llama-style count leaves out.
    assert get_model(name).num_params == pytest.approx(params, rel=0.02)


def test_gpu_lookup_is_case_insensitive_and_has_aliases() -> None:
    assert get_gpu("h100") is get_gpu("H100-SXM")
    assert get_gpu("A100") is get_gpu("a100-80gb")
    assert get_gpu("H200").mem_gb == 141.0
    assert get_gpu("H100-SXM").tflops == 989.0


def test_unknown_gpu_lists_known_ones() -> None:
    with pytest.raises(SchedkitError, match="unknown GPU 'B200'") as info:
        get_gpu("B200")
    for known in ("A100-80GB", "H100-SXM", "H200"):
        assert known in str(info.value)


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(SchedkitError, match=r"Llama-3-8B.*Qwen2\.5-14B"):
        get_model("Mistral-7B")


def test_kv_capacity_of_llama3_8b_on_h100() -> None:
    model, gpu = get_model("Llama-3-8B"), get_gpu("H100")
    expected = (72e9 - 1e9 - model.weight_bytes) // 131072
    assert kv_capacity_tokens(model, gpu, 1, 0.9) == expected
    assert kv_capacity_tokens(model, gpu, 2, 0.9) > 2 * expected


def test_70b_on_one_h100_raises_with_the_fix() -> None:
    with pytest.raises(SchedkitError, match=r"Llama-3-70B needs ~141 GB.*tp=1.*--tp 2 or more"):
        kv_capacity_tokens(get_model("Llama-3-70B"), get_gpu("H100"), 1, 0.9)
    assert kv_capacity_tokens(get_model("Llama-3-70B"), get_gpu("H100"), 2, 0.9) > 0


def test_load_toml_profile_file_registers_profiles(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(
        '[[gpu]]\nname = "L40S"\ntflops = 362\nmem_bw_gbs = 864\nmem_gb = 48\n'
        '[[model]]\nname = "Tiny"\nnum_layers = 2\nhidden_size = 64\nnum_heads = 4\n'
        "num_kv_heads = 2\nhead_dim = 16\nvocab_size = 100\nintermediate_size = 128\n"
    )
    registry = ProfileRegistry.with_builtins()
    registry.load_file(path)
    assert registry.get_gpu("l40s") == GPUProfile("L40S", 362.0, 864.0, 48.0)
    assert registry.get_model("tiny").kv_bytes_per_token == 2 * 2 * 2 * 16 * 2
    with pytest.raises(SchedkitError):
        get_gpu("L40S")  # a private registry leaves the default one alone


def test_load_json_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    gpu = {"name": "MI300X", "tflops": 1307, "mem_bw_gbs": 5300, "mem_gb": 192}
    path.write_text(json.dumps({"gpu": [gpu]}))
    registry = ProfileRegistry.with_builtins()
    registry.load_file(path)
    assert registry.get_gpu("MI300X").mem_gb == 192.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[gpu]]\nname = "X"\ntflops = -1\nmem_bw_gbs = 1\nmem_gb = 1\n', r"gpu\[0\]\.tflops"),
        ('[[gpu]]\nname = "X"\ntflops = 1\nmem_bw_gbs = 1\nmem_gb = 1\nwatts = 700\n', "watts"),
        ('[[gpu]]\nname = "X"\ntflops = 1\nmem_bw_gbs = 1\n', r"gpu\[0\]\.mem_gb"),
        ("[[tpu]]\nname = 'X'\n", "tpu"),
        ("[[gpu]\n", "not valid toml"),
    ],
)
def test_bad_profile_file_names_file_and_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SchedkitError, match=problem) as info:
        ProfileRegistry.with_builtins().load_file(path)
    assert str(path) in str(info.value)


def test_model_heads_must_divide(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    model = dict(
        name="Odd", num_layers=1, hidden_size=8, num_heads=3, num_kv_heads=2, head_dim=4,
        vocab_size=10, intermediate_size=16,
    )  # fmt: skip
    path.write_text(json.dumps({"model": [model]}))
    with pytest.raises(SchedkitError, match="multiple of num_kv_heads"):
        ProfileRegistry.with_builtins().load_file(path)


def test_clashing_name_is_rejected_and_nothing_is_registered(tmp_path: Path) -> None:
    path = tmp_path / "clash.toml"
    path.write_text(
        '[[gpu]]\nname = "New"\ntflops = 1\nmem_bw_gbs = 1\nmem_gb = 1\n'
        '[[gpu]]\nname = "h100-sxm"\ntflops = 1\nmem_bw_gbs = 1\nmem_gb = 1\n'
    )
    registry = ProfileRegistry.with_builtins()
    with pytest.raises(SchedkitError, match="already defined differently"):
        registry.load_file(path)
    with pytest.raises(SchedkitError, match="unknown GPU"):
        registry.get_gpu("New")


def test_missing_and_wrongly_named_files(tmp_path: Path) -> None:
    registry = ProfileRegistry.with_builtins()
    with pytest.raises(SchedkitError, match="cannot read profile file"):
        registry.load_file(tmp_path / "missing.toml")
    with pytest.raises(SchedkitError, match=r"\.toml or \.json"):
        registry.load_file(tmp_path / "profiles.yaml")


def test_registering_identical_profile_twice_is_fine() -> None:
    registry = ProfileRegistry.with_builtins()
    registry.register_model(ModelProfile("Llama-3-8B", 32, 4096, 32, 8, 128, 128256, 14336))
    assert registry.model_names().count("Llama-3-8B") == 1


@pytest.mark.parametrize(
    ("device", "profile"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100", "H100-SXM"),
        ("h100-sxm", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", None),  # another board: its bandwidth differs
        ("NVIDIA A100-SXM4-40GB", None),  # another memory size
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200", "H200"),
        ("NVIDIA L4", None),
        ("cpu", None),
    ],
)
def test_a_cuda_device_name_finds_its_gpu_profile(device: str, profile: str | None) -> None:
    found = ProfileRegistry.with_builtins().gpu_for_device(device)
    assert (found.name if found else None) == profile


def test_a_device_two_profiles_fit_finds_none() -> None:
    registry = ProfileRegistry.with_builtins()
    registry.register_gpu(GPUProfile("H100-SXM-alt", tflops=900.0, mem_bw_gbs=3000.0, mem_gb=80))
    assert registry.gpu_for_device("NVIDIA H100 80GB HBM3") is None


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("meta-llama/Meta-Llama-3-8B", "Llama-3-8B"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"),
        ("llama-3-8b", "Llama-3-8B"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "Llama-3-70B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("Qwen/Qwen2.5-72B", None),
        ("meta-llama/Llama-3.1-8B", None),  # the words do not run in order
        ("llama-3-8b/tokenizer", None),  # only the last component names the model
        ("", None),
    ],
)
def test_an_engines_model_name_finds_its_profile(name: str, profile: str | None) -> None:
    found = ProfileRegistry.with_builtins().model_for_engine_name(name)
    assert (found.name if found else None) == profile


def test_a_model_directory_finds_the_profile_registered_for_it(tmp_path: Path) -> None:
    directory = tmp_path / "tiny"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    registry = ProfileRegistry.with_builtins()
    tiny = ModelProfile(str(directory) + "/", 2, 64, 4, 2, 16, 1000, 128)
    registry.register_model(tiny)
    assert registry.model_for_engine_name(str(directory)) == tiny
    assert registry.model_for_engine_name(str(tmp_path / "other")) is None
