"""Bad bench input (issue #12): one clear paragraph naming the problem and the fix, never a
traceback, and nothing written. A representative subset runs the real CLI in a subprocess,
the rest in-process. None of them generates a large workload: limits are checked first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from schedkit.bench.engine_settings import check_engine_settings
from schedkit.bench.output import check_out_dir, write_outputs
from schedkit.bench.results import Results
from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.cli.policy_args import _json_object
from schedkit.config import load_config
from schedkit.errors import PolicyConfigError, SchedkitError, quote
from schedkit.inputs import read_lines
from schedkit.records import RunResult
from schedkit.sim.cost.calibration import load_cost_profile, read_steps
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.profiles import (
    ModelProfile,
    check_tp,
    get_gpu,
    get_model,
    kv_capacity_tokens,
    load_profile_file,
    tp_degrees,
)
from schedkit.workload import load_workload
from schedkit.workload.limits import MAX_DURATION_VAR, MAX_REQUESTS_VAR
from schedkit.workload.synthetic import inline_workload

SMALL = "poisson:rate=40,n=50,prompt=200,output=20"
RANDOM_BYTES = bytes.fromhex("b6e2ff00c38e9a11") * 32  # not UTF-8 from byte 0 on
LIMIT_HINT = (
    "use fewer (a smaller n, rate or duration, or a shorter trace), or raise the limit for"
    " this run with the environment variable SCHEDKIT_MAX_REQUESTS, e.g."
)


def schedkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedkit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {}), "COLUMNS": "100"},
    )


def cli_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The message of a CLI error: exit status 2, no traceback, one paragraph on stderr."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr  # one paragraph: printed unwrapped, the terminal wraps
    assert lines[0].startswith("error: ")
    return lines[0].removeprefix("error: ")


def bench_error(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = tmp_path / "out"
    message = cli_error(schedkit("bench", *args, "--out", str(out), env=env))
    assert not out.exists()  # nothing partial: not even an empty directory
    return message


def spec(**fields: object) -> BenchSpec:
    return BenchSpec.model_validate({"workload": SMALL, "policies": ["fcfs"], **fields})


# --- through the CLI -----------------------------------------------------------------------


def test_deeply_nested_jsonl_line(tmp_path: Path) -> None:
    trace = tmp_path / "deep.jsonl"
    trace.write_text("[" * 100_000 + "\n")
    assert bench_error(tmp_path, "--workload", str(trace), "--policy", "fcfs") == (
        f"{trace}: line 1: not a request: it is nested deeper than the parser can follow"
        " (thousands of levels of [ or {); no schedkit file nests more than a few levels"
    )


def test_binary_config_file(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_bytes(RANDOM_BYTES)
    assert bench_error(tmp_path, "--workload", SMALL, "--policy", str(config)) == (
        f"config file {config} is not UTF-8 text (byte 0 is 0xb6), so it looks like a binary"
        ' file; pass a TOML or JSON text file such as: policy = ["slo", "vtc"]'
    )


def test_out_that_is_a_file_fails_before_any_arm_runs(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.write_text("keep me")
    started = time.perf_counter()
    # A workload that would take minutes to simulate: the check comes first.
    proc = schedkit("bench", "--workload", "azure-conv", "--policy", "fcfs", "--out", str(out))
    assert cli_error(proc) == (
        f"--out '{out}' is an existing file, not a directory; pass a directory for"
        " results.json and the reports (it is created if missing), or move the file away"
    )
    assert time.perf_counter() - started < 20
    assert out.read_text() == "keep me"


@pytest.mark.skipif(sys.platform != "linux", reason="/sys is Linux's")
def test_unwritable_out_fails_before_any_arm_runs() -> None:
    try:  # root may write most places, but not /sys
        fd, name = tempfile.mkstemp(dir="/sys")
    except OSError:
        pass
    else:  # pragma: no cover - an unusual /sys
        os.close(fd)
        os.unlink(name)
        pytest.skip("/sys is writable here")
    proc = schedkit("bench", "--workload", SMALL, "--policy", "fcfs", "--out", "/sys/sk/out")
    assert cli_error(proc) == (
        "--out '/sys/sk/out' is not writable (Permission denied creating a file in '/sys');"
        " pass a directory you can write to, or fix its permissions"
    )


def test_huge_synthetic_workload_is_refused_at_once(tmp_path: Path) -> None:
    started = time.perf_counter()
    message = bench_error(tmp_path, "--workload", "poisson:rate=1e6,n=1e11", "--policy", "fcfs")
    assert message == (
        "workload 'poisson:rate=1e6,n=1e11' would hold 100,000,000,000 requests, more than"
        f" the limit of 10,000,000; {LIMIT_HINT} SCHEDKIT_MAX_REQUESTS=20000000 schedkit"
        " bench ..."
    )
    assert time.perf_counter() - started < 20  # the interpreter's start, not a generation


def test_limit_is_raised_through_the_environment(tmp_path: Path) -> None:
    env = {MAX_REQUESTS_VAR: "40"}
    message = bench_error(tmp_path, "--workload", SMALL, "--policy", "fcfs", env=env)
    assert message == (
        f"workload {SMALL!r} would hold 50 requests, more than the limit of 40; {LIMIT_HINT}"
        " SCHEDKIT_MAX_REQUESTS=100 schedkit bench ..."
    )
    out = tmp_path / "ok"
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--out", str(out),
        env={MAX_REQUESTS_VAR: "50"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "results.json").read_text())["workload"]["requests"] == 50


def test_huge_csv_line_stops_reading(tmp_path: Path) -> None:
    trace = tmp_path / "big.csv"
    with trace.open("w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,")
        f.write("7" * (8 << 20) + ",5\n")  # an 8 MiB cell
    assert bench_error(tmp_path, "--workload", str(trace), "--policy", "fcfs") == (
        f"{trace}: line 2 is longer than 1,048,576 bytes; a trace line holds one request (a"
        " few hundred bytes). Check that this is a trace file, with one request per line"
    )


def test_long_csv_cell_is_quoted_short(tmp_path: Path) -> None:
    trace = tmp_path / "long.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68," + "x" * 500_000 + ",5\n"
    )
    message = bench_error(tmp_path, "--workload", str(trace), "--policy", "fcfs")
    assert message == (
        f"{trace}: line 2: ContextTokens '{'x' * 100}'... (500,000 characters) is not an"
        " integer token count"
    )


def test_tp_that_does_not_divide_the_heads(tmp_path: Path) -> None:
    assert bench_error(tmp_path, "--workload", SMALL, "--policy", "fcfs", "-tp", "3") == (
        "--tp 3 cannot split Llama-3-8B across GPUs: 3 does not divide its 32 attention heads,"
        " so no engine could shard it that way; use --tp 1, 2, 4, 8, 16 or 32"
    )


def test_real_engine_refuses_settings_it_does_not_pass(tmp_path: Path) -> None:
    # Refused before the engine is loaded, so this holds whether schedkit-vllm is installed.
    args: tuple[str, ...] = (
        "--workload",
        SMALL,
        "--policy",
        "fcfs",
        "--engine",
        "vllm",
        "-tp",
        "2",
    )
    assert bench_error(tmp_path, *args) == (
        "--engine vllm does not pass these settings to the engine, so results.json would"
        " record settings the run did not use: --tensor-parallel-size 2 (it runs one in-process"
        " engine on one device). Drop them (the engine ignores --tensor-parallel-size,"
        " --replicas, --gpu, --profile, --eviction-window, --kv-cache-dtype,"
        " --[no-]mixed-prefill, --prefill-schedule-interval, --cache-aware-admission-window,"
        " --cache-aware-admission-threshold, --kv-offloading-size, --kv-offloading-bandwidth,"
        " --kv-offloading-latency-ms, --[no-]async-scheduling, --prefill-replicas,"
        " --decode-replicas, --prefill-tp, --decode-tp, --prefill-gpu, --decode-gpu,"
        " --kv-link), or use --engine sim, which"
        " honours every setting"
    )
    message = bench_error(tmp_path, *args[:6], "--kv-offloading-size", "8")
    assert "--kv-offloading-size 8.0 (the in-process engine runs without KV offloading" in message
    # SGLang batches by its own rules: the simulator's SGLang schedule is not an SGLang knob
    args = ("--workload", SMALL, "--policy", "fcfs", "--engine", "sglang", "--no-mixed-prefill")
    message = bench_error(tmp_path, *args)
    assert "--[no-]mixed-prefill False (the engine batches prefills by its own rules" in message


def test_an_lmdeploy_bench_engine_points_to_serve_and_openai(tmp_path: Path) -> None:
    message = bench_error(tmp_path, "--workload", SMALL, "--policy", "fcfs", "--engine", "lmdeploy")
    assert message.startswith("unknown engine 'lmdeploy'; installed: sim, openai, import")
    assert "`schedkit serve lmdeploy`" in message and "--engine openai" in message


def test_markup_in_a_message_is_printed_as_is(tmp_path: Path) -> None:
    assert bench_error(tmp_path, "--workload", SMALL, "--policy", "fcfs", "--gpu", "[b]x") == (
        "unknown GPU '[b]x'; known GPUs: A100-80GB, H100-SXM, H200. Pick one of these or load"
        " a profile file with a [[gpu]] table."
    )


STUCK_ENGINE = """
    from schedkit.bench.runner import run_on_sim

    def run(bench, index, rate_scale):
        result = run_on_sim(bench, index, rate_scale)
        if index == 1:  # the second arm loses its last 3 requests
            for rec in result.records[-3:]:
                rec.finish_reason, rec.output_tokens = "", 0
                rec.scheduled_s = rec.first_token_s = rec.finish_s = None
        return result
"""


def test_unfinished_requests_have_a_row_and_exit_4(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "stuck_engine-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: stuck-engine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[schedkit.engines]\nstuck = stuck_engine:run\n")
    (site / "stuck_engine.py").write_text(textwrap.dedent(STUCK_ENGINE))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    proc = schedkit(
        "bench", "--workload", SMALL, "--policy", "fcfs", "--policy", "priority",
        "--engine", "stuck", "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "unfinished" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["unfinished", "0", "3"]
    message = [line for line in proc.stderr.splitlines() if not line.startswith("bench: ")]
    assert " ".join(" ".join(message).split()) == (  # past the progress lines
        "! requests unfinished when the run ended (priority: 3); their latencies are missing"
        " from every metric, so the arms are not comparable. Check the engine's log; exit"
        " status 4"
    )
    results = json.loads((out / "results.json").read_text())  # the results are kept
    assert [a["metrics"]["unfinished"] for a in results["arms"]] == [0, 3]


def test_strict_policy_faults_keep_exit_3_and_help_documents_4() -> None:
    proc = schedkit("bench", "--help")
    text = " ".join(proc.stdout.split())
    assert "4 when an arm left requests unfinished" in text
    assert "3 with --strict when a policy faulted" in text


# --- in-process ----------------------------------------------------------------------------


def test_binary_json_config_and_profile_files(tmp_path: Path) -> None:
    config, profile = tmp_path / "bad.json", tmp_path / "gpus.toml"
    config.write_bytes(b"{}" + RANDOM_BYTES)
    profile.write_bytes(RANDOM_BYTES)
    with pytest.raises(PolicyConfigError) as exc:
        load_config(str(config))
    assert str(exc.value) == (
        f"config file {config} is not UTF-8 text (byte 2 is 0xb6), so it looks like a binary"
        ' file; pass a TOML or JSON text file such as: policy = ["slo", "vtc"]'
    )
    with pytest.raises(SchedkitError) as profile_exc:
        load_profile_file(profile)
    assert str(profile_exc.value) == (
        f"profile file {profile} is not UTF-8 text (byte 0 is 0xb6), so it looks like a binary"
        " file; pass a TOML or JSON file of [[gpu]] / [[model]] tables"
    )


NESTED = (
    "it is nested deeper than the parser can follow (thousands of levels of [ or {); no"
    " schedkit file nests more than a few levels"
)


def test_deep_nesting_everywhere(tmp_path: Path) -> None:
    with pytest.raises(PolicyConfigError) as exc:
        load_config('{"policy": ' + "[" * 100_000)
    assert str(exc.value) == f"config is not valid JSON: {NESTED}"
    with pytest.raises(SchedkitError) as options_exc:
        _json_object("[" * 100_000)
    assert str(options_exc.value) == f"--options is not valid JSON: {NESTED}"
    toml_config = tmp_path / "deep.toml"
    toml_config.write_text("policy = " + "[" * 100_000)
    with pytest.raises(PolicyConfigError) as exc:
        load_config(str(toml_config))
    assert str(exc.value) == f"config file {toml_config} is not valid toml: {NESTED}"
    workload = tmp_path / "deep.json"
    workload.write_text("[" * 100_000)
    with pytest.raises(SchedkitError) as workload_exc:
        load_workload(str(workload))
    assert str(workload_exc.value) == f"{workload.resolve()}: not valid JSON: {NESTED}"
    cost = tmp_path / "cost.json"
    cost.write_text('{"kind": ' * 100_000)
    with pytest.raises(SchedkitError) as cost_exc:
        load_cost_profile(cost)
    assert str(cost_exc.value) == f"cost profile {cost} is not valid JSON: {NESTED}"


def test_integers_too_long_to_convert(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 1}\n')
    with pytest.raises(SchedkitError) as exc:
        load_workload(str(trace))
    assert str(exc.value) == (
        f"{trace.resolve()}: line 1: not a request: it holds an integer of more than 4,300"
        " digits, far more than any count or time needs"
    )
    timings = tmp_path / "timings.csv"
    timings.write_text("prefill_tokens,decode_tokens,kv_tokens,seconds\n" + "9" * 5000 + ",1,1,1\n")
    with pytest.raises(SchedkitError) as exc:
        read_steps(timings)
    assert str(exc.value) == (
        f"{timings}, line 2: prefill_tokens must be an integer >= 0, got '{'9' * 100}'..."
        " (5,000 characters)"
    )


def test_long_policy_name_is_an_unknown_policy() -> None:
    with pytest.raises(
        SchedkitError, match=r"^unknown policy 'x{100}'\.\.\. \(10,000 characters\)"
    ):
        from schedkit.facade import PolicyFacade

        PolicyFacade.from_config(load_config("x" * 10_000))


def test_quote_bounds_every_kind_of_value() -> None:
    assert quote("short") == "'short'"
    assert quote("y" * (1 << 20)) == f"'{'y' * 100}'... (1,048,576 characters)"
    assert quote(b"\x00" * 101).endswith("... (101 bytes)")
    assert quote(10**5000) == "an integer of about 5,000 digits"
    assert quote([10**5000]) == "a list holding an integer too long to print"
    assert quote(list(range(1000))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert len(quote({"k" * 10_000: ["v" * 10_000] * 50})) <= 103
    nested: list[object] = []
    for _ in range(500):
        nested = [nested]
    assert quote(nested) == "[[[[...]]]]"


def test_synthetic_limits_are_checked_before_generating(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SchedkitError) as exc:
        inline_workload("gamma:rate=1e6,cv=2,duration=100")
    assert str(exc.value) == (
        "workload 'gamma:rate=1e6,cv=2,duration=100' (rate x duration) would hold 100,000,000"
        f" requests, more than the limit of 10,000,000; {LIMIT_HINT}"
        " SCHEDKIT_MAX_REQUESTS=100000000 schedkit bench ..."
    )
    with pytest.raises(SchedkitError) as exc:
        inline_workload("poisson:rate=1e-9,duration=1e300")
    assert str(exc.value).startswith(
        "workload 'poisson:rate=1e-9,duration=1e300' lasts 1e+300 s, longer than the limit"
    )
    assert str(exc.value).endswith(
        "s, longer than the limit of 2,592,000 s (30 days); use a shorter duration, or raise"
        " the limit for this run with the environment variable SCHEDKIT_MAX_DURATION_S, e.g."
        " SCHEDKIT_MAX_DURATION_S=5184000 schedkit bench ..."
    )
    monkeypatch.setenv(MAX_DURATION_VAR, "1e301")
    with pytest.raises(SchedkitError, match=r"\(rate x duration\) would hold 1e\+291 requests"):
        inline_workload("poisson:rate=1e-9,duration=1e300")
    monkeypatch.setenv(MAX_REQUESTS_VAR, "lots")
    with pytest.raises(SchedkitError) as exc:
        inline_workload("poisson:rate=1,n=3")
    assert str(exc.value) == (
        "SCHEDKIT_MAX_REQUESTS='lots' is not a number > 0; set it to the limit you want"
        " (default 10,000,000) or unset it"
    )


def test_workload_spec_limits(tmp_path: Path) -> None:
    spec_file = tmp_path / "big.toml"
    spec_file.write_text('name = "big"\nn = 100000000000\n[[tenant]]\nname = "a"\nrate = 1e6\n')
    with pytest.raises(SchedkitError) as exc:
        load_workload(str(spec_file))
    assert str(exc.value) == (
        f"workload spec {spec_file.resolve()} would hold 100,000,000,000 requests, more than"
        f" the limit of 10,000,000; {LIMIT_HINT} SCHEDKIT_MAX_REQUESTS=20000000 schedkit"
        " bench ..."
    )
    spec_file.write_text(
        'name = "long"\nduration_s = 1e7\n[[tenant]]\nname = "a"\nrate = 1e-3\n'
        '[[tenant]]\nname = "b"\nrate = 1e-3\n'
    )
    with pytest.raises(SchedkitError, match=r"lasts 10,000,000 s, longer than the limit"):
        load_workload(str(spec_file))


def test_a_poisson_draw_past_the_limit_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_REQUESTS_VAR, "100")  # rate x duration = 100; this draw has 115
    with pytest.raises(SchedkitError, match=r"would hold 101 requests, more than the limit"):
        inline_workload("poisson:rate=100,duration=1,seed=0")


def test_trace_line_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n' * 12)
    monkeypatch.setenv(MAX_REQUESTS_VAR, "10")
    with pytest.raises(SchedkitError) as exc:
        load_workload(str(trace))
    assert str(exc.value).startswith(
        f"trace {trace.resolve()} would hold 12 requests, more than the limit of 10;"
    )


def test_read_lines_bounds_each_line() -> None:
    import io

    assert read_lines(io.BytesIO(b"ab\ncd\n"), "f", limit=3) == b"ab\ncd\n"
    assert read_lines(io.BytesIO(b"abc\n"), "f", limit=3) == b"abc\n"
    with pytest.raises(SchedkitError, match=r"^f: line 2 is longer than 3 bytes"):
        read_lines(io.BytesIO(b"ab\nabcd\n"), "f", limit=3)


def test_tp_checked_against_heads_and_kv_heads() -> None:
    assert tp_degrees(get_model("Qwen2.5-7B")) == [1, 2, 4, 28]
    odd = ModelProfile("odd", 2, 1536, 24, 8, 64, 1000, 4096)
    with pytest.raises(SchedkitError) as exc:
        check_tp(odd, 12)
    assert str(exc.value) == (
        "--tp 12 cannot split odd across GPUs: 12 neither divides its 8 KV heads nor is a"
        " multiple of them, so no engine could shard it that way; use --tp 1, 2, 4, 8 or 24"
    )
    with pytest.raises(SchedkitError, match="--tp 3 cannot split Llama-3-8B"):
        RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100"), tp=3)
    # tp 16 over 8 KV heads stores each twice: half the KV tokens per byte of the 8-way split.
    llama70 = get_model("Llama-3-70B")
    eight = kv_capacity_tokens(llama70, get_gpu("H100"), 8)
    sixteen = kv_capacity_tokens(llama70, get_gpu("H100"), 16)
    assert sixteen < 2 * eight


def test_engine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    check_engine_settings(spec(engine="vllm"))  # the defaults pass
    check_engine_settings(spec(engine="someone-elses", tp=2, eviction_window=3))  # trusted
    with pytest.raises(SchedkitError) as exc:
        check_engine_settings(spec(engine="sglang", gpu_memory_utilization=0.5, gpu="H200"))
    assert str(exc.value) == (
        "--engine sglang does not pass these settings to the engine, so results.json would"
        " record settings the run did not use: --gpu H200 (it is timed by the wall clock on"
        " this machine, not by a GPU profile); --gpu-memory-utilization 0.5 (SGLang sizes its"
        " pools with its own mem_fraction_static). Drop them (the engine ignores"
        " --tensor-parallel-size, --replicas, --gpu, --profile, --gpu-memory-utilization,"
        " --eviction-window, --kv-cache-dtype, --[no-]mixed-prefill,"
        " --prefill-schedule-interval, --cache-aware-admission-window,"
        " --cache-aware-admission-threshold, --kv-offloading-size, --kv-offloading-bandwidth,"
        " --kv-offloading-latency-ms, --[no-]async-scheduling, --prefill-replicas,"
        " --decode-replicas, --prefill-tp, --decode-tp, --prefill-gpu, --decode-gpu,"
        " --kv-link), or use --engine sim, which"
        " honours every setting"
    )
    with pytest.raises(SchedkitError, match=r"^--engine vllm-twin .*--eviction-window 0 \("):
        check_engine_settings(spec(engine="vllm-twin", eviction_window=0))


def test_out_dir_checks_create_nothing(tmp_path: Path) -> None:
    check_out_dir(tmp_path / "a" / "b" / "c")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SchedkitError, match=r"is not a usable path \(File name too long\)"):
        check_out_dir(tmp_path / ("x" * 5000))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_out_dir_without_write_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        with pytest.raises(SchedkitError, match=r"is not writable \(Permission denied"):
            check_out_dir(locked / "out")
    finally:
        locked.chmod(0o755)


def test_unwritable_out_stops_the_bench_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    def no_arms(*args: object) -> None:  # pragma: no cover - must not be reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr("schedkit.bench.output.tempfile.mkstemp", refuse)
    monkeypatch.setattr("schedkit.bench.runner.Bench.__init__", no_arms)
    with pytest.raises(SchedkitError, match=r"is not writable \(Permission denied creating"):
        run_bench(spec(), tmp_path / "out")


def test_a_failed_write_is_an_error_and_leaves_earlier_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "results.json").write_text("earlier")

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", str(tmp_path / "report.html"))

    monkeypatch.setattr("schedkit.bench.report.render.write_report", full_disk)
    run = RunResult(policy="fcfs", records=[], duration_s=0.0)
    with pytest.raises(SchedkitError) as exc:
        write_outputs(
            tmp_path, Results.model_construct(), [run], slo_ttft_ms=None, slo_tpot_ms=None
        )
    assert str(exc.value) == (
        f"cannot write the results to --out '{tmp_path}': No space left on device"
        f" ('{tmp_path / 'report.html'}'); free space or pass another directory. Earlier"
        " results there are untouched"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert (tmp_path / "results.json").read_text() == "earlier"


def test_absurd_lengths_burstiness_and_rate_scales(tmp_path: Path) -> None:
    with pytest.raises(SchedkitError, match=r"prompt='1e300' needs a mean > 0 and at most 100,0"):
        inline_workload("poisson:rate=5,n=10,prompt=1e300")
    with pytest.raises(SchedkitError, match=r"cv='1e300' must be from 0\.01 .* to 10 "):
        inline_workload("gamma:rate=5,cv=1e300,n=10")
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68," + "9" * 300 + ",5\n"
    )
    with pytest.raises(
        SchedkitError, match=r"line 2: ContextTokens 9{18}\.\.\.9{19} is more than 100,0"
    ):
        load_workload(str(trace))
    with pytest.raises(SchedkitError) as exc:
        inline_workload("poisson:rate=5,n=10").scaled(1e-320)
    assert str(exc.value).startswith("--rate-scale 9.99989e-321 stretches poisson:rate=5,n=10's")


@pytest.mark.parametrize(
    "args",
    [
        ("--no-mixed-prefill", "--kv-offloading-size", "8"),
        ("--no-enable-prefix-caching", "--kv-offloading-size", "8"),
        ("--no-mixed-prefill", "--prefill-schedule-interval", "4"),
        ("--arm", "name=a", "--arm", "name=b,prefix_caching=false,kv_offloading_size=4"),
    ],
)
def test_settings_that_do_not_go_together_are_refused_by_name(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    message = bench_error(tmp_path, "--workload", SMALL, "--policy", "fcfs", *args)
    assert "these engine settings do not go together" in message
    assert "ValidationError" not in message and "Value error" not in message
    if "name=b" in " ".join(args):
        assert message.startswith("--arm b: ")
