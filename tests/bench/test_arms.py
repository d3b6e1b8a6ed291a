"""Arms = policy x engine settings (``--arm``, a config file's ``[engine]`` table): parsed
with clear errors, run with their own engine on the simulator, compared pairwise as
policy arms are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_bench_cli import schedkit

from schedkit.bench.arms import parse_arm, resolve_arms
from schedkit.bench.runner import Bench, BenchSpec, _check_overrides, run_bench
from schedkit.config import load_config
from schedkit.errors import PolicyConfigError, SchedkitError

# Enough load that max_num_seqs matters: 60 requests of 600 + 60 tokens in ~1.5 s.
LOADED = "poisson:rate=40,n=60,prompt=600,output=60"


def test_an_arm_names_its_policy_and_engine_settings() -> None:
    arm = parse_arm("name=seqs64, policy=slo+vtc, max_num_seqs=64, prefix-caching=false")
    assert arm.name == "seqs64" and arm.policy == "slo+vtc"
    assert arm.engine.overrides() == {"max_num_seqs": 64, "prefix_caching": False}
    assert parse_arm("max_num_seqs=8").policy == "fcfs"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name=a,max_seqs=3",
            r"--arm 'a': unknown key 'max_seqs'; valid keys: name, policy, .*max_num_seqs.*\(did you mean 'max_num_seqs'\?\)",
        ),
        (
            "name=a,max_num_seqs=0",
            r"^--arm 'a': max_num_seqs: '0' is not accepted; it takes an integer greater than 0$",
        ),
        (
            "name=a,gpu_memory_utilization=1.5",
            r"^--arm 'a': gpu_memory_utilization: '1\.5' is not accepted; it takes a number"
            r" greater than 0 and at most 1$",
        ),
        (
            "name=a,prefix_caching=maybe",
            r"^--arm 'a': prefix_caching: 'maybe' is not accepted; it takes true or false$",
        ),
        (
            "name=a,kv_cache_dtype=fp7",
            r"^--arm 'a': kv_cache_dtype: 'fp7' is not accepted; it takes 'auto', 'bfloat16',"
            r" 'float16', 'fp8', 'fp8_e4m3' or 'fp8_e5m2' \(did you mean 'fp8'\?\)$",
        ),
        ("name=a,max_num_seqs", r"'max_num_seqs' is not KEY=VALUE"),
        ("max_num_seqs=4,max_num_seqs=8", r"sets max_num_seqs twice"),
    ],
)
def test_a_bad_arm_is_an_error_naming_the_arm_and_the_key(text: str, message: str) -> None:
    with pytest.raises(SchedkitError, match=message):
        parse_arm(text)


def test_arms_run_with_their_own_engine_and_are_compared_pairwise(tmp_path: Path) -> None:
    spec = BenchSpec(
        workload=LOADED,
        policies=["fcfs"],
        arms=[parse_arm("name=same,policy=fcfs"), parse_arm("name=seqs2,max_num_seqs=2")],
        kv_blocks=4000,
        jobs=1,
    )
    results = run_bench(spec, tmp_path).to_json()
    fcfs, same, seqs2 = results["arms"]
    assert [a["policy"] for a in results["arms"]] == ["fcfs", "same", "seqs2"]
    assert fcfs["engine_settings"] == same["engine_settings"] == {}
    assert same["engine"] is None
    assert seqs2["engine_settings"] == {"max_num_seqs": 2}
    assert seqs2["engine"]["max_num_seqs"] == 2 and results["engine"]["max_num_seqs"] == 256

    def replayed(metrics: dict[str, Any]) -> dict[str, Any]:  # all but the label and clock
        return {k: v for k, v in metrics.items() if k not in ("policy", "wall_s")}

    assert replayed(same["metrics"]) == replayed(fcfs["metrics"])  # the same engine
    # Two sequences at a time: the queue grows, each decode step is smaller.
    assert seqs2["metrics"]["queue_ms"]["p90"] > 2 * fcfs["metrics"]["queue_ms"]["p90"]
    assert seqs2["metrics"]["tpot_ms"]["p50"] < fcfs["metrics"]["tpot_ms"]["p50"]
    compared = {c["policy"]: c for c in results["comparisons"]}
    assert set(compared) == {"same", "seqs2"}
    assert "worse on" in compared["seqs2"]["summary"]  # the queueing regression is named
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["arms"][2]["engine_settings"] == {"max_num_seqs": 2}


def test_a_config_file_engine_table_sets_the_arms_engine(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text('policy = ["fcfs"]\n\n[engine]\nmax_num_seqs = 4\nkv_blocks = 3000\n')
    bench = Bench(
        BenchSpec(
            workload=LOADED, policies=[str(path)], arms=[parse_arm(f"policy={path},kv_blocks=3500")]
        )
    )
    assert bench.labels == ["small", "small[kv_blocks=3500]"]
    assert [a.overrides for a in bench.arms] == [
        {"max_num_seqs": 4, "kv_blocks": 3000},
        {"max_num_seqs": 4, "kv_blocks": 3500},  # the arm's own key wins over the file's
    ]
    assert [e[2].num_blocks for e in bench.arm_engines] == [3000, 3500]
    assert bench.arm_engines[0][2].max_num_seqs == 4
    # A policy config (schedkit serve, vLLM's --additional-config) has no engine table.
    with pytest.raises(PolicyConfigError, match=r"\[engine\] table sets the engine settings"):
        load_config(path)
    path.write_text('policy = "fcfs"\n[engine]\nmax_seqs = 4\n')
    unknown = r"small.toml \[engine\]: unknown key 'max_seqs'; valid keys: model, gpu, .*"
    with pytest.raises(SchedkitError, match=unknown + r"\(did you mean 'max_num_seqs'\?\)$"):
        resolve_arms([str(path)], [])


def test_an_arm_the_engine_cannot_take_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SchedkitError, match=r"--arm tp3: --tp 3 cannot split Llama-3-8B"):
        Bench(BenchSpec(workload=LOADED, arms=[parse_arm("name=tp3,tp=3")]))
    with pytest.raises(
        SchedkitError,
        match=r"--arm tiny: kv_blocks=10 give a KV cache of 10 blocks .* below the longest",
    ):
        Bench(BenchSpec(workload=LOADED, arms=[parse_arm("name=tiny,kv_blocks=10")]))
    # a real engine takes per-arm settings it passes on, and refuses the others per arm
    spec = BenchSpec(workload=LOADED, engine="vllm", arms=[parse_arm("name=a,max_num_seqs=8")])
    _check_overrides(spec, resolve_arms([], spec.arms))
    spec = BenchSpec(workload=LOADED, engine="vllm", arms=[parse_arm("name=b,tp=2")])
    refused = r"arm b: --engine vllm does not pass .* --tensor-parallel-size 2"
    with pytest.raises(SchedkitError, match=refused):
        _check_overrides(spec, resolve_arms([], spec.arms))
    with pytest.raises(ValueError, match="no arm to run"):
        BenchSpec(workload=LOADED)


def test_a_scalar_flag_given_twice_is_an_error(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", LOADED, "--policy", "fcfs", "--max-num-seqs", "128",
        "--max-num-seqs=64", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--max-num-seqs is given 2 times; give it once" in proc.stderr
    assert "--arm" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_arms_from_the_command_line(tmp_path: Path) -> None:
    proc = schedkit(
        "bench", "--workload", LOADED, "--kv-blocks", "4000", "--arm", "name=seqs256,max_num_seqs=256",
        "--arm", "name=seqs2,max_num_seqs=2", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "seqs2 vs seqs256" in proc.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert [a["engine"]["max_num_seqs"] for a in results["arms"]] == [256, 2]


def test_an_engine_runner_sees_the_arms_own_settings() -> None:
    """Runners read ``bench.spec``, ``bench.sim_config`` and ``bench.cost``: for an arm
    with settings of its own, those are the arm's (``Bench.for_arm``)."""
    bench = Bench(
        BenchSpec(
            workload=LOADED, policies=["fcfs"], kv_blocks=4000,
            arms=[parse_arm("name=small,max_num_seqs=2,kv_blocks=3000")],
        )
    )  # fmt: skip
    assert bench.for_arm(0) is bench
    arm = bench.for_arm(1)
    assert arm.spec.settings.max_num_seqs == 2 and arm.spec.settings.kv_blocks == 3000
    assert arm.sim_config.max_num_seqs == 2 and arm.sim_config.num_blocks == 3000
    assert arm.engine_info is bench.arm_engines[1][0]  # what an engine records lands there
    assert bench.spec.settings.max_num_seqs == 256 and bench.sim_config.num_blocks == 4000


def test_record_steps_where_no_engine_honours_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        SchedkitError, match="wired for --engine vllm and --engine sglang, not --engine sim"
    ):
        Bench(BenchSpec(workload=LOADED, policies=["fcfs"], record_steps=str(tmp_path)))
    config = tmp_path / "rec.toml"
    config.write_text(f'policy = "fcfs"\nrecord_steps = "{tmp_path / "s.csv"}"\n')
    with pytest.raises(
        SchedkitError,
        match="arm rec: record_steps is honoured by --engine vllm and --engine sglang",
    ):
        Bench(BenchSpec(workload=LOADED, policies=[str(config)]))
    proc = schedkit("serve", "lmdeploy", "--record-steps", str(tmp_path / "s.csv"))
    assert proc.returncode == 2
    assert "wired for vllm and sglang only; lmdeploy would ignore it" in proc.stderr


def test_kv_cache_dtype_sizes_the_cache_and_the_reads() -> None:
    auto = Bench(BenchSpec(workload=LOADED, policies=["fcfs"]))
    fp8 = Bench(BenchSpec(workload=LOADED, policies=["fcfs"], kv_cache_dtype="fp8"))
    assert fp8.sim_config.num_blocks == pytest.approx(2 * auto.sim_config.num_blocks, rel=1e-3)
    assert fp8.engine_info["kv_cache_dtype"] == "fp8"
    # a decode step that reads a long context is cheaper when the KV cache is half the bytes
    assert fp8.cost.step_time(0, 64, 64 * 4096, 64 * 4096) < auto.cost.step_time(
        0, 64, 64 * 4096, 64 * 4096
    )
    same = Bench(BenchSpec(workload=LOADED, policies=["fcfs"], kv_cache_dtype="bfloat16"))
    assert same.sim_config.num_blocks == auto.sim_config.num_blocks  # the model's own dtype
    arms = Bench(BenchSpec(workload=LOADED, arms=[parse_arm("name=f8,kv_cache_dtype=fp8"),
                                                 parse_arm("name=bf16")]))  # fmt: skip
    assert arms.for_arm(0).sim_config.num_blocks == fp8.sim_config.num_blocks
    assert arms.for_arm(1).sim_config.num_blocks == auto.sim_config.num_blocks
    with pytest.raises(SchedkitError, match=r"--kv-cache-dtype fp8 \(the in-process engine"):
        Bench(BenchSpec(workload=LOADED, policies=["fcfs"], engine="vllm", kv_cache_dtype="fp8"))


def _section(text: str, start: str, end: str) -> str:
    at = text.index(start)
    return text[at : text.index(end, at)]


def test_every_output_states_what_each_arm_ran(tmp_path: Path) -> None:
    """The README's case study in small: arms that differ in max_num_seqs and
    gpu_memory_utilization. The reports' first screen, their Engine table and the command's
    summary give each arm's settings, the differing ones side by side, never the bench's
    default (256) that no arm ran with."""
    proc = schedkit(
        "bench", "--workload", LOADED, "--policy", "fcfs",
        "--arm", "name=seqs8,max_num_seqs=8,gpu_memory_utilization=0.9",
        "--arm", "name=seqs32,max_num_seqs=32,gpu_memory_utilization=0.85",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    fcfs, small, large = (arm["engine"] or results["engine"] for arm in results["arms"])
    blocks = [fcfs["num_blocks"], small["num_blocks"], large["num_blocks"]]
    assert blocks[0] == blocks[1] > blocks[2]  # 0.85 of the memory: fewer blocks
    differing = [
        ["max_num_seqs", "256", "8", "32"],
        ["gpu_memory_utilization", "0.9", "0.9", "0.85"],
        ["num_blocks", *map(str, blocks)],
    ]
    md = (tmp_path / "report.md").read_text()
    first = md[: md.index("## Summary")]  # what ran, before any verdict
    assert "| Engine setting | fcfs | seqs8 | seqs32 |" in first
    for row in differing:
        assert "| " + " | ".join(row) + " |" in first
    engine = _section(md, "### Engine", "### SLO")
    assert "| Setting | fcfs | seqs8 | seqs32 |" in engine
    for row in differing:  # marked in the table of every setting
        assert "| " + " | ".join(f"**{cell}**" for cell in row) + " |" in engine
    assert "| engine | sim | sim | sim |" in engine
    html = (tmp_path / "report.html").read_text()
    header = _section(html, "<header>", "</header>")
    assert '<table id="arm-engines">' in header and html.index("</header>") < html.index(
        '<section id="summary"'
    )
    for key, *values in differing:
        cells = "".join(f'<td class="num">{v}</td>' for v in values)
        assert f'<tr class="differs"><th>{key}</th>{cells}</tr>' in header
        cells = "".join(f"<td>{v}</td>" for v in values)
        assert f'<tr class="differs"><th>{key}</th>{cells}</tr>' in _section(
            html, '<section id="settings"', "</section>"
        )
    lines = proc.stdout.splitlines()
    assert "engine settings that differ between arms" in lines[0]
    table = lines[: next(i for i, line in enumerate(lines) if "metric" in line)]
    for key, *values in differing:  # the command's summary, above the metrics
        (line,) = [line for line in table if f" {key} " in line]
        assert [cell.strip() for cell in line.strip("│ ").split("│")] == [key, *values]


def test_an_arm_without_async_scheduling_pays_its_cpu_work_on_top(tmp_path: Path) -> None:
    """vLLM --no-async-scheduling: each step's CPU work adds to the GPU's instead of running
    during it, so the same stream takes longer; the bench says which it ran."""
    spec = BenchSpec(
        workload=LOADED, policies=["fcfs"], arms=[parse_arm("name=sync,async_scheduling=false")]
    )
    results = run_bench(spec, tmp_path).to_json()
    fcfs, sync = results["arms"]
    assert results["engine"]["cost_model"]["cpu_overlaps_gpu"] is True
    assert sync["engine"]["cost_model"]["cpu_overlaps_gpu"] is False
    assert sync["metrics"]["tpot_ms"]["mean"] > fcfs["metrics"]["tpot_ms"]["mean"]
    assert sync["metrics"]["e2e_ms"]["p90"] > fcfs["metrics"]["e2e_ms"]["p90"]


def test_no_async_scheduling_is_refused_where_nothing_models_the_cpu(tmp_path: Path) -> None:
    """A calibrated cost profile (or the roofline) has no CPU work of its own to overlap."""
    profile = tmp_path / "cost.json"
    profile.write_text(json.dumps({"kind": "linear", "c0": 0.01, "c_prefill": 0.0,
                                   "c_decode": 0.0, "c_kv": 0.0}))  # fmt: skip
    spec = BenchSpec(
        workload=LOADED, policies=["fcfs"], profile=str(profile),
        arms=[parse_arm("name=sync,async_scheduling=false")],
    )  # fmt: skip
    with pytest.raises(SchedkitError) as err:
        Bench(spec)
    assert str(err.value) == (
        "--arm sync: --no-async-scheduling changes only the per-operator GPU model's steps"
        " (its CPU work per step adds to the GPU's), and this run's steps are timed by the"
        " cost profile given with --profile, which has no CPU work to overlap; drop"
        " --no-async-scheduling"
    )
