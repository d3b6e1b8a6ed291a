from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit.errors import SchedkitError
from schedkit.sim.cost.calibration import (
    load_cost_profile,
    make_cost_model,
    profile_mismatch,
    read_steps,
    save_cost_profile,
)
from schedkit.sim.cost.fit import MIN_STEPS, StepRow, fit_steps, with_gaps
from schedkit.sim.cost.model import CostModel, LinearCostModel, RooflineCostModel
from schedkit.sim.cost.operators import OperatorCostModel
from schedkit.sim.cost.profiles import GPUProfile, get_gpu, get_model, tp_degrees

LLAMA_8B = get_model("Llama-3-8B")
H100 = get_gpu("H100-SXM")


def loop_run_time(cost: CostModel, n: int, kv0: int, k: int) -> float:
    return sum(cost.step_time(0, n, kv0 + n * j, kv0 + n * j) for j in range(k))


def brute_steps_before(cost: CostModel, n: int, kv0: int, budget: float, k_max: int) -> int:
    elapsed = 0.0
    for j in range(k_max):
        if elapsed >= budget:
            return j
        elapsed += cost.step_time(0, n, kv0 + n * j, kv0 + n * j)
    return k_max


# GPUs from compute-starved to bandwidth-starved, so both regime orders occur.
gpus = st.builds(
    GPUProfile,
    name=st.just("gpu"),
    tflops=st.floats(0.01, 5000),
    mem_bw_gbs=st.floats(10, 20000),
    mem_gb=st.just(80.0),
)
roofline_models = st.sampled_from(
    [get_model(m) for m in ("Llama-3-8B", "Llama-3-70B", "Qwen2.5-7B")]
).flatmap(
    lambda model: st.builds(
        RooflineCostModel,
        model=st.just(model),
        gpu=gpus,
        tp=st.sampled_from([d for d in tp_degrees(model) if d <= 8]),  # a shardable split
        compute_efficiency=st.floats(0.05, 1.0),
        bandwidth_efficiency=st.floats(0.05, 1.0),
        step_overhead_s=st.floats(0.0, 0.01),
    )
)
coefficient = st.floats(0.0, 1e-3)
linear_models = st.builds(LinearCostModel, coefficient, coefficient, coefficient, coefficient)
cost_models = st.one_of(roofline_models, linear_models)


def test_empty_step_costs_nothing() -> None:
    assert RooflineCostModel(LLAMA_8B, H100).step_time(0, 0, 500, 0) == 0.0
    assert LinearCostModel(0.01, 1e-5, 1e-4, 1e-7).step_time(0, 0, 0, 0) == 0.0


def test_small_decode_step_is_weight_bandwidth_bound() -> None:
    cost = RooflineCostModel(LLAMA_8B, H100, step_overhead_s=0.0)
    compute, memory = cost.roofline_times(0, 1, 1024, 1024)
    assert memory > 100 * compute
    bytes_read = LLAMA_8B.weight_bytes + 1024 * LLAMA_8B.kv_bytes_per_token
    assert cost.step_time(0, 1, 1024, 1024) == pytest.approx(bytes_read / (3350e9 * 0.85))


def test_long_prefill_is_compute_bound_and_tp_divides_time() -> None:
    pairs = 8192 * 8193 // 2
    one = RooflineCostModel(LLAMA_8B, H100, step_overhead_s=0.0)
    compute, memory = one.roofline_times(8192, 0, 8192, pairs)
    assert compute > 5 * memory
    two = RooflineCostModel(LLAMA_8B, H100, tp=2, step_overhead_s=0.0)
    assert two.step_time(8192, 0, 8192, pairs) == pytest.approx(compute / 2)


@settings(max_examples=300, deadline=None)
@given(
    cost=cost_models,
    n=st.integers(0, 600),
    kv0=st.integers(0, 200_000),
    k=st.integers(0, 400),
)
def test_decode_run_time_matches_loop(cost: CostModel, n: int, kv0: int, k: int) -> None:
    assert cost.decode_run_time(n, kv0, k) == pytest.approx(
        loop_run_time(cost, n, kv0, k), rel=1e-9, abs=1e-300
    )


def regime(cost: RooflineCostModel, n: int, kv: int) -> str:
    compute, memory = cost.roofline_times(0, n, kv, kv)
    return "compute" if compute > memory else "memory"


# Memory overtakes compute as contexts grow; on a compute-starved GPU, the reverse.
@pytest.mark.parametrize(
    ("tflops", "n", "kv0", "k"), [(989.0, 400, 0, 3000), (10.0, 1, 100_000, 30_000)]
)
def test_decode_run_time_across_a_regime_switch(tflops: float, n: int, kv0: int, k: int) -> None:
    gpu = GPUProfile("test", tflops=tflops, mem_bw_gbs=3350.0, mem_gb=80.0)
    cost = RooflineCostModel(LLAMA_8B, gpu)
    assert regime(cost, n, kv0) != regime(cost, n, kv0 + n * (k - 1))
    assert cost.decode_run_time(n, kv0, k) == pytest.approx(
        loop_run_time(cost, n, kv0, k), rel=1e-9
    )


@settings(max_examples=300, deadline=None)
@given(
    cost=cost_models,
    n=st.integers(0, 300),
    kv0=st.integers(0, 100_000),
    k_max=st.integers(0, 300),
    fraction=st.floats(-0.1, 1.2),
)
def test_decode_steps_before_matches_brute_force(
    cost: CostModel, n: int, kv0: int, k_max: int, fraction: float
) -> None:
    budget = fraction * loop_run_time(cost, n, kv0, k_max)
    got = cost.decode_steps_before(n, kv0, budget, k_max)
    expected = brute_steps_before(cost, n, kv0, budget, k_max)
    if got != expected:  # only a float tie at a step boundary may differ
        boundary = loop_run_time(cost, n, kv0, min(got, expected))
        assert abs(got - expected) == 1
        assert boundary == pytest.approx(budget, rel=1e-9)


def test_decode_steps_before_edges() -> None:
    cost = RooflineCostModel(LLAMA_8B, H100)
    one_step = cost.step_time(0, 4, 4000, 4000)
    assert cost.decode_steps_before(4, 4000, 0.0, 10) == 0
    assert cost.decode_steps_before(4, 4000, 1e-12, 10) == 1
    assert cost.decode_steps_before(4, 4000, one_step, 10) == 1
    assert cost.decode_steps_before(4, 4000, one_step * 1.0001, 10) == 2
    assert cost.decode_steps_before(4, 4000, 1e9, 10) == 10
    assert cost.decode_steps_before(4, 4000, 1.0, 0) == 0
    with pytest.raises(SchedkitError, match="k_max"):
        cost.decode_steps_before(4, 4000, 1.0, -1)


def test_bad_arguments_raise() -> None:
    with pytest.raises(SchedkitError, match="tp must be >= 1"):
        RooflineCostModel(LLAMA_8B, H100, tp=0)
    with pytest.raises(SchedkitError, match=r"in \(0, 1\]"):
        RooflineCostModel(LLAMA_8B, H100, compute_efficiency=1.5)
    with pytest.raises(SchedkitError, match="c_kv"):
        LinearCostModel(0.0, 0.0, 0.0, -1.0)
    with pytest.raises(SchedkitError, match="kv_tokens=-1"):
        LinearCostModel(0.0, 0.0, 0.0, 0.0).step_time(1, 0, -1, 0)


def test_kv_capacity_and_70b_error() -> None:
    cost = RooflineCostModel(LLAMA_8B, H100)
    assert cost.kv_capacity_blocks(16, 0.9) == cost.kv_capacity_tokens(0.9) // 16
    assert 400_000 < cost.kv_capacity_tokens(0.9) < 440_000
    big = RooflineCostModel(get_model("Llama-3-70B"), H100)
    with pytest.raises(SchedkitError, match=r"H100-SXM x tp=1 has 72 GB.*--tp 2"):
        big.kv_capacity_tokens(0.9)


TRUTH = (0.004, 6e-5, 2e-5, 4e-8, 2e-11)


def synthetic_rows(
    coef: tuple[float, ...], count: int, noise: float, seed: int, attn: bool = True
) -> list[StepRow]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        prefill = rng.choice([0, rng.randint(1, 8192)])
        decode = rng.randint(0 if prefill else 1, 256)
        kv = rng.randint(0, 400_000)
        pairs = rng.randint(0, 10**8) if attn else 0
        seconds = coef[0] + coef[1] * prefill + coef[2] * decode + coef[3] * kv
        seconds += coef[4] * pairs if len(coef) > 4 else 0.0
        rows.append(
            StepRow(prefill, decode, kv, seconds * (1 + rng.gauss(0, noise)), pairs, i * 0.01)
        )
    return rows


ROOFLINE = RooflineCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))


def test_the_fit_keeps_long_steps_whole_when_no_linear_model_fits() -> None:
    # Nine short decode steps for every long mixed one whose time grows faster than
    # linearly with its prompt. Relative error (each row divided by its time) would fit
    # the short ones and leave the long ones ~6% short in total, the time queues wait
    # behind; the 1/sqrt(time) weighting keeps both within 1.5% in total.
    rng = random.Random(3)
    rows = []
    for i in range(1000):
        n = rng.randint(1, 8)
        p = 0 if i % 10 else rng.randint(50, 700)
        seconds = 0.010 + 0.0004 * n + 0.0002 * p + 2e-7 * p * p
        rows.append(StepRow(p, n, 200 * n + p, seconds, 200 * n + 64 * p, i * 0.01))
    model = fit_steps(rows, ROOFLINE, test_share=0.01).model

    def total(steps: list[StepRow]) -> float:
        predicted = sum(
            model.step_time(r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs)
            for r in steps
        )
        return predicted / sum(r.seconds for r in steps)

    assert total([r for r in rows if r.prefill_tokens]) == pytest.approx(1.0, abs=0.015)
    assert total([r for r in rows if not r.prefill_tokens]) == pytest.approx(1.0, abs=0.015)


def test_nnls_recovers_noiseless_coefficients_and_reports_the_held_out_error() -> None:
    fit = fit_steps(synthetic_rows(TRUTH, 200, 0.0, seed=1), ROOFLINE)
    assert fit.holdout["all"]["mape"] < 1e-6 and fit.train_steps == 140 and fit.test_steps == 60
    fitted = tuple(getattr(fit.model, c) for c in ("c0", "c_prefill", "c_decode", "c_kv", "c_attn"))
    assert fitted == pytest.approx(TRUTH, rel=1e-5)
    assert not fit.warnings and not fit.fixed


def test_noise_shows_in_the_held_out_error_per_step_kind() -> None:
    fit = fit_steps(synthetic_rows(TRUTH, 600, 0.05, seed=2), ROOFLINE)
    assert 0.02 < fit.holdout["all"]["mape"] < 0.08
    assert fit.holdout["all"]["p90_ape"] > fit.holdout["all"]["mape"]
    assert set(fit.holdout) == {"all", "prefill", "decode", "mixed"}
    assert sum(fit.holdout[k]["n"] for k in ("prefill", "decode", "mixed")) == fit.test_steps
    assert fit.model.c_prefill == pytest.approx(6e-5, rel=0.1)


def test_the_error_is_measured_on_later_steps_than_the_fit() -> None:
    """The machine slows down halfway: a fit on the first 70% cannot know, and says so."""
    rows = synthetic_rows(TRUTH, 300, 0.0, seed=4)
    slow = [StepRow(r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.seconds * (2 if i >= 210 else 1), r.attn_pairs, r.start_s) for i, r in enumerate(rows)]  # fmt: skip
    fit = fit_steps(list(reversed(slow)), ROOFLINE)  # file order does not matter: start_s does
    assert fit.train_mape < 1e-6 and fit.holdout["all"]["mape"] == pytest.approx(0.5, rel=1e-3)


def test_coefficients_stay_non_negative() -> None:
    # Time falls slightly with kv_tokens, which a cost model cannot express: c_kv -> 0.
    rows = [StepRow(r.prefill_tokens, r.decode_tokens, r.kv_tokens, 0.01 + 1e-5 * r.prefill_tokens + 1e-4 * r.decode_tokens - 1e-9 * r.kv_tokens, 0, r.start_s) for r in synthetic_rows(TRUTH, 80, 0.0, seed=3)]  # fmt: skip
    fit = fit_steps(rows, ROOFLINE)
    assert fit.model.c_kv == 0.0
    assert min(fit.model.c0, fit.model.c_prefill, fit.model.c_decode) > 0


def test_a_feature_that_never_varies_keeps_the_roofline_value() -> None:
    fit = fit_steps(synthetic_rows(TRUTH[:4], 100, 0.0, seed=5, attn=False), ROOFLINE)
    reference = ROOFLINE.linear_coefficients()["c_attn"]
    assert fit.fixed == {"c_attn": reference} and fit.model.c_attn == reference
    [warning] = fit.warnings
    assert "attn_pairs never varies in the 70 fitted steps (always 0)" in warning
    assert "stays at the roofline's value" in warning


def test_too_few_steps_and_bad_steps_are_refused() -> None:
    with pytest.raises(SchedkitError, match=rf"at least {MIN_STEPS} steps .* got 19"):
        fit_steps(synthetic_rows(TRUTH, 19, 0.0, seed=1), ROOFLINE)
    rows = synthetic_rows(TRUTH, 30, 0.0, seed=1)
    rows[3] = StepRow(1, 0, 1, 0.0)
    with pytest.raises(SchedkitError, match="step 3: seconds must be > 0"):
        fit_steps(rows, ROOFLINE)


STEPS_HEADER = "start_s,end_s,prefill_tokens,decode_tokens,kv_tokens,attn_pairs,batch_size,num_running,num_waiting,seconds\n"


def test_read_steps_with_its_metadata_and_any_column_order(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text(
        '# schedkit-steps {"engine": "vllm", "model": "tiny", "gpu": "cpu", "tp": 1}\n'
        + STEPS_HEADER
        + "0.0,0.03,512,0,512,131328,1,1,0,0.03\n\n0.03,0.04,0,8,9000,9000,8,8,2,0.01\n"
    )
    rows, meta = read_steps(path)
    assert meta == {"engine": "vllm", "model": "tiny", "gpu": "cpu", "tp": 1}
    assert rows == [
        StepRow(512, 0, 512, 0.03, 131328, 0.0, 0.03, 1),
        StepRow(0, 8, 9000, 0.01, 9000, 0.03, 0.04, 8),
    ]
    old = tmp_path / "old.csv"  # the four columns of schedkit 0.2
    old.write_text("seconds,kv_tokens,decode_tokens,prefill_tokens\n0.1,3,2,1\n")
    assert read_steps(old) == ([StepRow(1, 2, 3, 0.1)], {})


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("1,2,3,0.1\n1,2,x,0.1\n", r"line 3: kv_tokens must be an integer >= 0, got 'x'"),
        ("1,2,3\n", r"line 2: expected 4 fields, got 3"),
        ("1,2,3,-0.5\n", r"line 2: seconds must be a number > 0"),
        ("1,2,3,0\n", r"line 2: seconds must be a number > 0"),
        ("-1,2,3,0.1\n", r"line 2: prefill_tokens must be"),
    ],
)
def test_bad_steps_name_file_and_line(tmp_path: Path, body: str, problem: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("prefill_tokens,decode_tokens,kv_tokens,seconds\n" + body)
    with pytest.raises(SchedkitError, match=problem) as info:
        read_steps(path)
    assert str(path) in str(info.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("prefill_tokens,decode_tokens,seconds\n1,2,0.1\n")
    with pytest.raises(SchedkitError, match="line 1: the header lacks the column 'kv_tokens'"):
        read_steps(path)


def test_cost_profile_round_trip_and_mismatch_warning(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    fit = fit_steps(synthetic_rows(TRUTH, 100, 0.01, seed=6), ROOFLINE)
    recorded = {"engine": "vllm", "model": "Llama-3-8B", "gpu": "H100-SXM", "tp": 1}
    save_cost_profile(fit, path, source="h100.csv", recorded_for=recorded)
    data = json.loads(path.read_text())
    assert data["kind"] == "linear" and data["source"] == "h100.csv"
    assert data["mape"] == fit.holdout["all"]["mape"] and data["recorded_for"] == recorded
    assert data["fit"]["test_steps"] == 30
    assert load_cost_profile(path).describe() == fit.model.describe()
    assert profile_mismatch(path, "Llama-3-8B", "H100-SXM", 1) is None
    warning = profile_mismatch(path, "Llama-3-8B", "A100-80GB", 2)
    assert warning is not None and "gpu 'H100-SXM' (the bench: 'A100-80GB')" in warning
    assert "tp 1 (the bench: 2)" in warning


def test_a_profile_recorded_under_the_engines_names_matches_the_bench(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    fit = fit_steps(synthetic_rows(TRUTH, 100, 0.01, seed=6), ROOFLINE)
    recorded = {"model": "meta-llama/Meta-Llama-3-8B", "gpu": "NVIDIA H100 80GB HBM3", "tp": 1}
    save_cost_profile(fit, path, source="h100.csv", recorded_for=recorded)
    assert profile_mismatch(path, "Llama-3-8B", "H100-SXM", 1) is None
    warning = profile_mismatch(path, "Llama-3-70B", "A100-80GB", 1)
    assert warning is not None
    assert "model 'meta-llama/Meta-Llama-3-8B' (the bench: 'Llama-3-70B')" in warning
    assert "gpu 'NVIDIA H100 80GB HBM3' (the bench: 'A100-80GB')" in warning


def test_bad_cost_profile_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"kind": "linear", "c0": 0.1}))
    with pytest.raises(SchedkitError, match="c_prefill") as info:
        load_cost_profile(path)
    assert str(path) in str(info.value)
    path.write_text("{nope")
    with pytest.raises(SchedkitError, match="not valid JSON"):
        load_cost_profile(path)


def test_make_cost_model(tmp_path: Path) -> None:
    cost, model, gpu = make_cost_model("llama-3-8b", "h100", 2, None)
    assert isinstance(cost, OperatorCostModel)  # schedkit has fits for H100-SXM
    assert cost.describe()["tp"] == 2 and model is LLAMA_8B and gpu is H100
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(LinearCostModel(0.01, 0, 0, 0).describe()))  # a 0.2 profile
    cost, model, _ = make_cost_model("Llama-3-8B", "H100", 1, str(path))
    assert isinstance(cost, LinearCostModel) and cost.step_time(0, 1, 1, 1) == 0.01


def test_the_gap_after_a_busy_step_belongs_to_it() -> None:
    busy = StepRow(8, 0, 8, 0.010, 36, start_s=0.0, end_s=0.010, num_running=2)
    idle = StepRow(0, 2, 20, 0.004, 20, start_s=0.012, end_s=0.016, num_running=0)
    last = StepRow(0, 1, 10, 0.003, 10, start_s=0.5, end_s=0.503, num_running=1)
    rows, share = with_gaps([last, idle, busy])  # any order: by start
    assert [r.seconds for r in rows] == pytest.approx([0.012, 0.004, 0.003])
    assert share == pytest.approx(0.002 / 0.019)
