"""``benchmarks/gpu/kernels.py`` runs end to end on CPU with tiny shapes (issue #41 item 4),
so that the GPU script cannot rot where no GPU is present."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks/gpu/kernels.py"
FITS = ROOT / "benchmarks/fidelity/fit-operators.json"
OPERATORS = (
    "attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "lm_head",
    "rmsnorm", "silu_and_mul", "rope", "add",
    "attention_prefill", "attention_decode", "attention_decode_paged", "kv_gather",
)  # fmt: skip


def test_tiny_cpu_run_writes_a_profile_and_the_comparison(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out)]
    command += ["--compare", str(FITS), "--gpu", "H100-SXM"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    profile = json.loads(out.read_text())
    assert profile["tiny"] is True and profile["torch"]
    for op in OPERATORS:
        points = profile["operators"][op]
        assert points, op
        for p in points:
            assert math.isfinite(p["seconds"]) and p["seconds"] > 0, (op, p)
    compared = {row["operator"]: row for row in profile["comparison"]["operators"]}
    assert set(compared) == set(profile["operators"])
    assert compared["mlp_up_proj"]["predicted_over_measured_median"] > 0
    assert "fit_seconds" in profile["operators"]["rmsnorm"][0]
    table = Path(f"{out}.compare.txt").read_text()
    assert "mlp_up_proj" in table and "kv_gather" in table
