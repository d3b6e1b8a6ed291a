"""A faulty policy never loses a request or a KV token in the real SGLang scheduler."""

from __future__ import annotations

from pathlib import Path

from engine_util import engine, prompt, read_lines


def _errors_counted(metrics_dir: Path, policy: str = "test-flaky") -> float:
    """``schedkit_policy_errors_total`` for ``policy``, from the scheduler's metric files."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return sum(
        sample.value
        for family in registry.collect()
        if family.name == "schedkit_policy_errors"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("policy") == policy
    )


def test_a_policy_raising_on_10_percent_of_calls_loses_nothing(
    model_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "steps.jsonl"
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    options = {"test-flaky": {"seed": 3, "fault_rate": 0.1}, "test-step-log": {"path": str(log)}}
    n = 40
    prompts = [prompt(i % 7, 24 + 8 * (i % 5)) + prompt(i, 4) for i in range(n)]  # shared prefixes
    params = [{"max_new_tokens": 8 + (i % 4) * 4, "ignore_eos": True} for i in range(n)]
    pressure = {
        "SGLANG_TEST_RETRACT": "1",  # retraction every 3rd step: the victim hook runs
        # schedkit's counters in the scheduler process go to files here (SGLang's own
        # metrics stay off: --enable-metrics in-process breaks a second engine).
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
    }
    with engine(
        model_dir,
        "test-flaky+test-step-log",
        options,
        extra_env=pressure,
        max_total_tokens=1200,  # small: cached prefixes get evicted
        max_running_requests=8,
        radix_cache_backend="schedkit",
    ) as llm:
        outputs = llm.generate(input_ids=prompts, sampling_params=params)
        # A round trip to the scheduler: the last batch's step report is written after
        # its outputs went out, and must be before the engine shuts down.
        llm.get_server_info()
    for out, param in zip(outputs, params, strict=True):
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert out["meta_info"]["completion_tokens"] == param["max_new_tokens"]
    steps = read_lines(log)
    assert steps, "the step log stayed empty"
    last = steps[-1]
    assert last["waiting"] == 0
    # Every KV token is free again or held only by the prefix cache (evictable).
    assert last["free"] == last["total"]
    assert any(line["preempted"] for line in steps)  # retraction happened
    assert _errors_counted(metrics) > 0


def test_a_stalling_or_exiting_policy_neither_stalls_nor_stops_the_engine(
    model_dir: Path, tmp_path: Path
) -> None:
    """Issue #35: with ``hook_budget_hard`` a 2 s hook is abandoned after 10 ms and
    ``SystemExit`` from a hook is a counted fault: the engine serves every request."""
    import json

    metrics = tmp_path / "metrics"
    metrics.mkdir()
    config = {"policy": ["test-stalling"], "hook_budget_ms": 10, "hook_budget_hard": True}
    env = {"SCHEDKIT_CONFIG": json.dumps(config), "PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    n = 20
    prompts = [prompt(i, 16 + 4 * (i % 5)) for i in range(n)]
    params = [{"max_new_tokens": 6, "ignore_eos": True} for _ in range(n)]
    with engine(model_dir, None, extra_env=env, max_running_requests=4) as llm:
        outputs = llm.generate(input_ids=prompts, sampling_params=params)
        llm.get_server_info()
    for out in outputs:
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert out["meta_info"]["completion_tokens"] == 6
    # The abandoned calls and the sys.exit() calls are policy errors, counted.
    assert _errors_counted(metrics, "test-stalling") >= n // 5 + 1
