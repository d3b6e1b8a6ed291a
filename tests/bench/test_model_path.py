"""`schedkit bench --model PATH` on the simulator: a local Hugging Face model folder's
config.json sizes the model, and the output says which model ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from schedkit.bench.results import Results

SMALL = "poisson:rate=20,n=40,prompt=200,output=20"
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}


def schedkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_bench_runs_a_model_folder_and_names_it(tmp_path: Path) -> None:
    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MIXTRAL))
    out = tmp_path / "out"
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--model", str(folder),
        "--tensor-parallel-size", "2", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Mixtral-8x7B-v0.1 on H100-SXM" in " ".join(proc.stdout.split())
    results = Results.model_validate_json((out / "results.json").read_text())
    engine = results.engine
    assert engine["model"] == engine["cost_model"]["model"] == "Mixtral-8x7B-v0.1"
    profile = engine["model_profile"]
    assert profile["source"] == "Mixtral-8x7B-v0.1/config.json"
    assert (profile["experts"], profile["experts_per_token"]) == (8, 2)
    assert (profile["params_b"], profile["active_params_b"]) == (46.7, 12.88)
    assert profile["kv_bytes_per_token"] == 131072
    assert results.arms[0].metrics.completed == 40
    report = (out / "report.md").read_text()
    assert "source=Mixtral-8x7B-v0.1/config.json" in report and "experts=8" in report


def test_bench_refuses_a_model_path_it_cannot_size(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**MIXTRAL, "num_hidden_layers": 0}))
    for model, message in (
        (str(folder), "num_hidden_layers must be a positive integer, got 0"),
        (str(tmp_path / "nowhere"), "--model PATH to a local Hugging Face model folder"),
    ):
        proc = schedkit(
            "bench", "--workload", SMALL, "--policy", "fcfs", "--model", model,
            "--out", str(tmp_path / "out"),
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert message in " ".join(proc.stderr.split())
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()
