"""The tensor-parallel rule the engines apply, and reading a model's heads from disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedkit.sim.cost.profiles import BUILTIN_MODELS
from schedkit.sim.cost.profiles import tp_degrees as profile_degrees
from schedkit.tensor_parallel import (
    AttentionHeads,
    hub_cache_dir,
    model_config_file,
    read_attention_heads,
    tp_degrees,
    tp_splits,
)


def _engines_split(heads: int, kv_heads: int, tp: int) -> bool:
    """What vLLM's and SGLang's ``QKVParallelLinear`` (and LMDeploy's config check) do:
    ``divide`` asserts, so a split is possible when every ``divide`` they call is exact."""
    if heads % tp:
        return False  # divide(total_num_heads, tp_size)
    if tp >= kv_heads:
        return tp % kv_heads == 0  # divide(tp_size, total_num_kv_heads): KV heads replicated
    return kv_heads % tp == 0  # divide(total_num_kv_heads, tp_size)


@given(
    st.integers(1, 160).flatmap(
        lambda heads: st.tuples(
            st.just(heads), st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0])
        )
    ),
    st.integers(1, 200),
)
def test_the_rule_is_the_engines(shape: tuple[int, int], tp: int) -> None:
    heads, kv_heads = shape
    assert tp_splits(heads, kv_heads, tp) == _engines_split(heads, kv_heads, tp)
    assert (tp in tp_degrees(heads, kv_heads)) == _engines_split(heads, kv_heads, tp)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "degrees"),
    [
        (32, 8, [1, 2, 4, 8, 16, 32]),  # Llama-3-8B
        (28, 4, [1, 2, 4, 28]),  # Qwen2.5-7B: 7 and 14 divide the heads, not the KV heads
        (4, 4, [1, 2, 4]),
        (12, 1, [1, 2, 3, 4, 6, 12]),  # one KV head (MQA): replicated on every GPU
    ],
)
def test_degrees_of_known_shapes(heads: int, kv_heads: int, degrees: list[int]) -> None:
    assert tp_degrees(heads, kv_heads) == degrees
    assert AttentionHeads(heads, kv_heads).degrees == degrees
    assert not tp_splits(heads, kv_heads, 0)


def test_the_simulators_profiles_use_the_same_rule() -> None:
    for model in BUILTIN_MODELS:
        assert profile_degrees(model) == tp_degrees(model.num_heads, model.num_kv_heads)


def _config(path: Path, data: Any) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(data))
    return path / "config.json"


def test_heads_are_read_from_config_json(tmp_path: Path) -> None:
    llama = {"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert read_attention_heads(_config(tmp_path / "a", llama)) == AttentionHeads(32, 8)
    no_kv = {"num_attention_heads": 12}  # KV heads default to the attention heads
    assert read_attention_heads(_config(tmp_path / "b", no_kv)) == AttentionHeads(12, 12)
    multimodal = {"vision_config": {"num_attention_heads": 16}, "text_config": llama}
    assert read_attention_heads(_config(tmp_path / "c", multimodal)) == AttentionHeads(32, 8)
    mla = {"num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512}
    assert read_attention_heads(_config(tmp_path / "d", mla)) == AttentionHeads(128, 128)


@pytest.mark.parametrize(
    "data",
    [
        {"hidden_size": 64},  # no heads (a state-space model)
        {"num_attention_heads": "32"},
        {"num_attention_heads": 0},
        {"num_attention_heads": True},
        [1, 2],
        "not an object",
    ],
)
def test_a_config_without_usable_heads_gives_none(tmp_path: Path, data: Any) -> None:
    assert read_attention_heads(_config(tmp_path, data)) is None


def test_an_unreadable_config_gives_none(tmp_path: Path) -> None:
    assert read_attention_heads(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_bytes(b"{not json")
    assert read_attention_heads(tmp_path / "bad.json") is None
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xff"}')
    assert read_attention_heads(tmp_path / "latin1.json") is None


def _hub_model(cache: Path, repo: str, commit: str, branch: str = "main") -> Path:
    """A model as ``huggingface_hub`` caches it: refs/<branch> naming a snapshot."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / branch).write_text(commit)
    return _config(folder / "snapshots" / commit, {"num_attention_heads": 8})


def test_a_local_directory_is_found(tmp_path: Path) -> None:
    config = _config(tmp_path / "model", {"num_attention_heads": 8})
    assert model_config_file(str(tmp_path / "model")) == config
    assert model_config_file(str(tmp_path / "empty")) is None
    (tmp_path / "weights-only").mkdir()
    assert model_config_file(str(tmp_path / "weights-only")) is None


def test_a_hub_id_is_found_in_the_cache_offline(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    config = _hub_model(cache, "org/model", "abc123")
    env = {"HF_HUB_CACHE": str(cache)}
    assert model_config_file("org/model", environ=env) == config
    assert model_config_file("org/other", environ=env) is None
    assert model_config_file("org/model", revision="abc123", environ=env) == config  # a commit
    assert model_config_file("org/model", revision="v2", environ=env) is None
    assert model_config_file("org/model", revision="../..", environ=env) is None
    download_dir = tmp_path / "downloads"  # the engine's --download-dir is a cache too
    elsewhere = _hub_model(download_dir, "org/model", "def456")
    assert model_config_file("org/model", download_dir=str(download_dir), environ=env) == elsewhere
    assert model_config_file("x" * 5000, environ=env) is None  # a name too long for a path


def test_the_hub_cache_is_where_huggingface_hub_puts_it(tmp_path: Path) -> None:
    assert hub_cache_dir({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert hub_cache_dir({"HUGGINGFACE_HUB_CACHE": "/c"}) == Path("/c")
    assert hub_cache_dir({"HF_HOME": "/b"}) == Path("/b/hub")
    assert hub_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/huggingface/hub")
    assert hub_cache_dir({}) == Path("~/.cache/huggingface/hub").expanduser()
