"""One real in-process vLLM engine (tiny random-weight Llama) with a schedkit policy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from schedkit import Admission, EngineView, Policy, PolicyOptions, RequestView, hookimpl


class TenantGate(Policy):
    """Reject one tenant; record the order requests finish in, by tenant."""

    def __init__(self, options: PolicyOptions | None = None) -> None:
        super().__init__(options)
        self.finished: list[tuple[str, str]] = []

    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject("tenant blocked") if request.tenant == "blocked" else None

    @hookimpl
    def on_request_finished(self, request: RequestView, reason: str) -> None:
        self.finished.append((request.tenant, reason))


def test_llm_runs_with_schedkit_scheduler(
    tiny_model: Path, register_policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    register_policy("tenant-gate", TenantGate)
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(tiny_model),
        dtype="bfloat16",
        max_model_len=256,
        enforce_eager=True,
        skip_tokenizer_init=True,
        scheduler_cls="schedkit_vllm.Scheduler",
        additional_config={"schedkit": {"policy": ["tenant-gate", "priority"]}},
    )
    prompts = [{"prompt_token_ids": [5 + i] * (10 + i)} for i in range(6)]
    params = [
        SamplingParams(
            max_tokens=8,
            ignore_eos=True,
            detokenize=False,
            extra_args={"tenant": "blocked" if i == 2 else "ok"},
        )
        for i in range(6)
    ]
    outputs = llm.generate(prompts, params, priority=[i % 3 for i in range(6)])
    assert len(outputs) == 6
    for i, out in enumerate(outputs):
        if i == 2:
            assert out.outputs[0].finish_reason == "abort"
            assert out.outputs[0].stop_reason == "rejected: tenant blocked"
            assert list(out.outputs[0].token_ids) == []
        else:
            assert len(out.outputs[0].token_ids) == 8
    core = llm.llm_engine.engine_core.engine_core
    scheduler = core.scheduler
    assert type(scheduler).__module__ == "schedkit_vllm.scheduler"
    runtime = scheduler.schedkit
    assert runtime.facade.label == "tenant-gate+priority"
    assert runtime.num_rejected == 1 and runtime.policy_errors == 0
    gate = runtime.facade.policies[0][1]
    assert sorted(gate.finished) == [("blocked", "rejected")] + [("ok", "length")] * 5
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
