"""The per-operator step model (issue #41): closed forms, composition, fits, choice."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_costmodel import brute_steps_before, loop_run_time

from schedkit.errors import SchedkitError
from schedkit.sim.cost.calibration import default_cost_model, make_cost_model
from schedkit.sim.cost.model import RooflineCostModel
from schedkit.sim.cost.operators import (
    ELEMENTWISE,
    GEMMS,
    LOGIT_BYTES,
    AllReduceCurve,
    OperatorCostModel,
    bandwidth_time,
    fits_for,
    gemm_time,
    shard_shapes,
)
from schedkit.sim.cost.profiles import GPUProfile, get_gpu, get_model, tp_degrees

BUILTIN_GPUS = ("A100-80GB", "H100-SXM", "H200")
DENSE = ("Llama-3-8B", "Llama-3-70B", "Qwen2.5-7B", "Qwen2.5-14B")

operator_models = st.tuples(st.sampled_from(DENSE), st.sampled_from(BUILTIN_GPUS)).flatmap(
    lambda names: st.builds(
        OperatorCostModel,
        model=st.just(get_model(names[0])),
        gpu=st.just(get_gpu(names[1])),
        tp=st.sampled_from([d for d in tp_degrees(get_model(names[0])) if d <= 8]),
        async_scheduling=st.booleans(),
    )
)


@settings(max_examples=60, deadline=None)
@given(
    operator_models,
    st.integers(0, 300),
    st.integers(0, 200_000),
    st.integers(0, 200),
)
def test_decode_run_time_matches_the_steps(
    cost: OperatorCostModel, n: int, kv0: int, k: int
) -> None:
    assert cost.decode_run_time(n, kv0, k) == pytest.approx(
        loop_run_time(cost, n, kv0, k), rel=1e-9
    )


@settings(max_examples=40, deadline=None)
@given(operator_models, st.integers(1, 256), st.integers(0, 50_000), st.floats(0.0, 2.0))
def test_decode_steps_before_matches_brute_force(
    cost: OperatorCostModel, n: int, kv0: int, budget: float
) -> None:
    assert cost.decode_steps_before(n, kv0, budget, 300) == brute_steps_before(
        cost, n, kv0, budget, 300
    )


def test_every_builtin_gpu_has_fits_and_h200_uses_h100s_at_its_own_peaks() -> None:
    for name in BUILTIN_GPUS:
        assert fits_for(get_gpu(name)) is not None
    h100 = OperatorCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
    h200 = OperatorCostModel(get_model("Llama-3-8B"), get_gpu("H200"))
    assert h200.measured_on == "H100-SXM" and "at H200's peaks" in h200.describe()["fits"]
    # The same efficiencies on faster memory: a memory-bound decode step is quicker.
    assert h200.step_time(0, 8, 8 * 2048, 8 * 2048) < h100.step_time(0, 8, 8 * 2048, 8 * 2048)


def test_a_step_is_the_sum_of_its_operators() -> None:
    """Recompute one mixed step from the public curves, operator by operator."""
    model, gpu, tp = get_model("Llama-3-70B"), get_gpu("A100-80GB"), 4
    cost = OperatorCostModel(model, gpu, tp)
    fits, s = cost.fits, shard_shapes(model, tp)
    peak, bw = gpu.tflops * 1e12, gpu.mem_bw_gbs * 1e9
    prefill, decode, ctx = 512, 31, 1000  # one 512-token chunk after 1000 cached, 31 decodes
    t = prefill + decode
    decode_kv = decode * 3000
    kv = decode_kv + ctx + prefill
    pairs = decode_kv + prefill * ctx + prefill * (prefill + 1) // 2

    def gemm(op: str, k: int, n: int, tokens: int) -> float:
        nbytes = 2 * (k * n + tokens * (k + n))
        return gemm_time(fits.gemm[op].params(), 2.0 * tokens * k * n, nbytes, tokens, peak, bw)

    layer = sum(gemm(op, k, n, t) for op, (k, n) in zip(GEMMS, s.gemm, strict=True))
    layer += sum(
        bandwidth_time(fits.elementwise[op].params(), t * b, bw)
        for op, b in zip(ELEMENTWISE, s.elementwise_bytes, strict=True)
    )
    pf = fits.attention_prefill
    prefill_pairs = pairs - kv + prefill
    layer += pf.t0_s + 4 * 16 * 128 * prefill_pairs / (
        peak * pf.compute_eff_max * prefill / (prefill + pf.compute_half_size)
    )
    dc = fits.attention_decode
    kv_bytes = 2 * 2 * 128 * 2  # K and V of the 2 KV heads on each of 4 shards, bf16
    layer += dc.t0_s + kv * kv_bytes / (
        bw * dc.bandwidth_eff_max * decode / (decode + dc.batch_half_size)
    )
    reduce = fits.all_reduce[4]
    reduces = (2 * model.num_layers + 1) * (reduce.t0_s + t * 8192 * 2 / (reduce.gbs * 1e9))
    rows = decode + 1
    head = gemm("mlp_up_proj", 8192, 128256 // 4, rows)
    sampling = bandwidth_time(
        fits.elementwise["mlp_act"].params(), rows * 128256 // 4 * LOGIT_BYTES, bw
    )
    gpu_s = model.num_layers * layer + reduces + head + sampling
    cpu_s = fits.step_overhead_s + fits.step_overhead_per_request_s * rows
    # Async scheduling (vLLM's GPU default) overlaps the CPU's work with the GPU's.
    assert cost.step_time(prefill, decode, kv, pairs) == pytest.approx(max(gpu_s, cpu_s), rel=1e-12)
    sync = OperatorCostModel(model, gpu, tp, async_scheduling=False)
    assert sync.step_time(prefill, decode, kv, pairs) == pytest.approx(gpu_s + cpu_s, rel=1e-12)


def test_the_cpu_work_grows_with_the_requests_and_shows_when_the_gpu_is_quicker() -> None:
    """Vidur's measured CPU time per step: about 1.3 ms plus 43 us a request."""
    model, gpu = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    cost = OperatorCostModel(model, gpu)
    assert 0.5e-3 < cost.cpu_seconds(1) < 3e-3
    assert cost.cpu_seconds(256) - cost.cpu_seconds(0) == pytest.approx(
        256 * cost.fits.step_overhead_per_request_s
    )
    assert 10e-6 < cost.fits.step_overhead_per_request_s < 200e-6
    # Short requests at a large batch: the CPU's work outlasts the GPU's, so the step
    # takes it, with or without overlap (without, it adds).
    n = 256
    step = cost.step_time(0, n, n * 16, n * 16)
    assert step == pytest.approx(cost.cpu_seconds(n))
    sync = OperatorCostModel(model, gpu, async_scheduling=False)
    assert sync.step_time(0, n, n * 16, n * 16) > step


def test_more_work_never_takes_less_time() -> None:
    cost = OperatorCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
    assert cost.step_time(0, 0, 0, 0) == 0.0
    decode = [cost.step_time(0, n, n * 1024, n * 1024) for n in (1, 2, 8, 32, 128, 512)]
    assert decode == sorted(decode)
    prefill = [cost.step_time(c, 0, c, c * (c + 1) // 2) for c in (16, 128, 1024, 8192)]
    assert prefill == sorted(prefill)
    longer = [cost.step_time(0, 16, 16 * ctx, 16 * ctx) for ctx in (128, 1024, 8192, 32768)]
    assert longer == sorted(longer)


def test_tensor_parallelism_adds_all_reduces_and_splits_the_weights() -> None:
    model, gpu = get_model("Llama-3-70B"), get_gpu("H100-SXM")
    tp4, tp8 = OperatorCostModel(model, gpu, 4), OperatorCostModel(model, gpu, 8)
    # A decode step of a few requests reads the weights: eight GPUs read half as much each.
    assert tp8.step_time(0, 4, 4096, 4096) < tp4.step_time(0, 4, 4096, 4096)
    # Each step pays 2 all-reduces a layer and one after the embedding, of its activations.
    free = AllReduceCurve(t0_s=0.0, gbs=1e12)
    no_reduce = tp4.fits.model_copy(update={"all_reduce": {4: free}})
    saved = tp4.step_time(0, 64, 64 * 1024, 64 * 1024) - OperatorCostModel(
        model, gpu, 4, no_reduce
    ).step_time(0, 64, 64 * 1024, 64 * 1024)
    reduce = tp4.fits.all_reduce[4]
    per_reduce = reduce.t0_s + 64 * 8192 * 2 / (reduce.gbs * 1e9)
    assert saved == pytest.approx(161 * per_reduce, rel=1e-3)


def test_a_plain_mlp_runs_one_up_projection_and_reads_less_in_its_activation() -> None:
    gated = dataclasses.replace(get_model("Llama-3-8B"), intermediate_size=16384)
    plain = dataclasses.replace(gated, mlp_gated=False)  # OPT's fc1, ReLU, fc2
    g, p = shard_shapes(gated, 2), shard_shapes(plain, 2)
    up, act = GEMMS.index("mlp_up_proj"), ELEMENTWISE.index("mlp_act")
    assert (g.gemm[up], p.gemm[up]) == ((4096, 2 * 8192), (4096, 8192))
    assert g.gemm[GEMMS.index("mlp_down_proj")] == p.gemm[GEMMS.index("mlp_down_proj")]
    assert (g.elementwise_bytes[act], p.elementwise_bytes[act]) == (3 * 8192 * 2, 2 * 8192 * 2)
    gpu = get_gpu("A100-80GB")
    for step in ((0, 8, 8192, 8192), (2048, 0, 2048, 2048 * 2049 // 2)):
        assert OperatorCostModel(plain, gpu).step_time(*step) < OperatorCostModel(
            gated, gpu
        ).step_time(*step)


def test_the_bench_times_steps_with_the_operator_model_where_it_can() -> None:
    cost, model, gpu = make_cost_model("Llama-3-8B", "H100", 1, None)
    assert isinstance(cost, OperatorCostModel) and cost.describe()["kind"] == "operators"
    # A GPU of the user's own has no fits; an MoE model's experts were never measured.
    own = GPUProfile("MyGPU", tflops=500.0, mem_bw_gbs=3000.0, mem_gb=80.0)
    assert isinstance(default_cost_model(model, own, 1), RooflineCostModel)
    moe = dataclasses.replace(model, num_experts=8, experts_per_token=2)
    assert isinstance(default_cost_model(moe, gpu, 1), RooflineCostModel)
    with pytest.raises(SchedkitError, match="MoE or MLA"):
        OperatorCostModel(moe, gpu, 1)
    with pytest.raises(SchedkitError, match="--tp 3 cannot split"):
        OperatorCostModel(model, gpu, 3)
    with pytest.raises(SchedkitError, match="no operator fits"):
        OperatorCostModel(model, own, 1)


def test_bad_step_arguments_raise() -> None:
    cost = OperatorCostModel(get_model("Llama-3-8B"), get_gpu("A100"))
    with pytest.raises(SchedkitError, match="must be >= 0"):
        cost.step_time(-1, 0, 0, 0)
    with pytest.raises(SchedkitError, match="must be >= 0"):
        cost.decode_run_time(1, -5, 3)


def test_the_model_pickles_with_what_it_has_cached() -> None:
    """A sweep sends the cost model to Ray workers, a plan to its process pool."""
    import pickle

    cost = OperatorCostModel(get_model("Qwen2.5-7B"), get_gpu("A100-80GB"), 2)
    before = cost.step_time(300, 20, 20_000, 40_000)
    copy = pickle.loads(pickle.dumps(cost))
    assert copy.step_time(300, 20, 20_000, 40_000) == before
    assert copy.decode_run_time(20, 20_000, 7) == cost.decode_run_time(20, 20_000, 7)


def test_a_broken_fits_profile_is_refused_and_tp_beyond_the_measured_says_so() -> None:
    from pydantic import ValidationError

    from schedkit.sim.cost.operators import OperatorFits

    good = OperatorCostModel(get_model("Llama-3-8B"), get_gpu("H100-SXM")).fits.model_dump()
    for broken in (
        {**good, "all_reduce": {}},
        {**good, "all_reduce": {1: good["all_reduce"][2]}},
        {**good, "gemm": {k: v for k, v in good["gemm"].items() if k != "mlp_up_proj"}},
    ):
        with pytest.raises(ValidationError):
            OperatorFits.model_validate(broken)
    model = get_model("Llama-3-70B")
    assert "all_reduce" not in OperatorCostModel(model, get_gpu("H100-SXM"), 8).describe()
    note = OperatorCostModel(model, get_gpu("H100-SXM"), 16).describe()["all_reduce"]
    assert "measured up to 8 GPUs in one node; tp=16" in note
