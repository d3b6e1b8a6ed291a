"""Drive the real vLLM V1 scheduler without a model (vLLM's own
tests/v1/core/test_scheduler.py::create_scheduler is the model for this)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from schedkit import Policy, PolicyRegistry
from schedkit.plugins import PolicyEntry
from schedkit.testing.models import VLLM_CPU, tiny_llama
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.request import Request

BLOCK_SIZE = 16
_HASH_FN = get_hash_fn_by_name("sha256_cbor")
init_none_hash(_HASH_FN)
_BLOCK_HASHER = get_request_block_hasher(BLOCK_SIZE, _HASH_FN)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama config: enough for vLLM's ModelConfig, no weights needed."""
    path = tmp_path_factory.mktemp("tiny-llama")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 2048,
        "max_position_embeddings": 2048,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, hidden-256 random-weight Llama with a 512-token vocabulary, for the
    suites that run a real engine (in-process, the bench arm, the OpenAI server), with a
    tokenizer of one word per token whose chat prompt of k words is k tokens (the server
    tests)."""
    path = tmp_path_factory.mktemp("tiny-llama-weights")
    return tiny_llama(path, **VLLM_CPU, word_tokenizer=True, chat_template=True)


@pytest.fixture
def make_scheduler(model_dir: Path) -> Callable[..., Any]:
    def make(
        schedkit: dict[str, Any] | None = None,
        *,
        cls: type | None = None,
        num_blocks: int = 200,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 512,
        policy: str = "fcfs",
        prefix_caching: bool = True,
    ) -> Any:
        return build_scheduler(
            num_blocks=num_blocks,
            block_size=BLOCK_SIZE,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            prefix_caching=prefix_caching,
            policy=policy,
            schedkit=schedkit,
            cls=cls,
            model_dir=model_dir,
        )

    return make


def make_request(
    request_id: str,
    prompt: int | list[int],
    max_tokens: int = 8,
    *,
    priority: int = 0,
    arrival_time: float | None = None,
    **xargs: Any,
) -> Request:
    tokens = list(range(1, prompt + 1)) if isinstance(prompt, int) else prompt
    # Distinct prompts unless a test shares prefixes on purpose.
    if isinstance(prompt, int):
        salt = sum(map(ord, request_id)) * 7
        tokens = [(t + salt) % 2000 + 1 for t in tokens]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=xargs or None)
    return Request(
        request_id,
        tokens,
        params,
        pooling_params=None,
        block_hasher=_BLOCK_HASHER,
        priority=priority,
        arrival_time=arrival_time,
    )


@dataclass
class Run:
    """What a scheduler did, step by step, in a comparable form."""

    steps: list[dict[str, int]] = field(default_factory=list)
    preempted: list[list[str]] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)  # first scheduling order
    finished: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # id -> (reason, stop)


def step(scheduler: Any, run: Run) -> None:
    output = scheduler.schedule()
    ids = list(output.num_scheduled_tokens)
    for new in output.scheduled_new_reqs:
        if new.req_id not in run.admitted:
            run.admitted.append(new.req_id)
    sampled = []
    for req_id in ids:
        request = scheduler.requests[req_id]
        done_prompt = request.num_computed_tokens >= request.num_tokens
        sampled.append([7] if done_prompt else [])
    model_output = model_runner_output(ids, sampled)
    engine_outputs = scheduler.update_from_output(output, model_output)
    run.steps.append(dict(output.num_scheduled_tokens))
    run.preempted.append(sorted(output.preempted_req_ids))
    for bundle in engine_outputs.values():
        for out in bundle.outputs:
            if out.finish_reason is not None:
                run.finished[out.request_id] = (out.finish_reason, out.stop_reason)


def run_until_idle(scheduler: Any, run: Run | None = None, max_steps: int = 2000) -> Run:
    run = run or Run()
    for _ in range(max_steps):
        if not scheduler.has_requests():
            return run
        step(scheduler, run)
    raise AssertionError(f"scheduler still busy after {max_steps} steps")


def free_blocks(scheduler: Any) -> int:
    return int(scheduler.kv_cache_manager.block_pool.get_num_free_blocks())


@pytest.fixture
def register_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[str, type[Policy]], None]]:
    """Make a test policy class installable by name for this test."""
    extra: dict[str, type[Policy]] = {}
    discover = PolicyRegistry.discover.__func__  # type: ignore[attr-defined]

    def patched(cls: type[PolicyRegistry]) -> PolicyRegistry:
        base = discover(cls)
        entries = base.entries() + [
            PolicyEntry(name, "schedkit-vllm-tests", "0", f"tests:{name}", _loaded=policy)
            for name, policy in extra.items()
        ]
        return PolicyRegistry(entries)

    monkeypatch.setattr(PolicyRegistry, "discover", classmethod(patched))

    def register(name: str, policy: type[Policy]) -> None:
        extra[name] = policy

    yield register


__all__ = ["VllmScheduler", "free_blocks", "make_request", "run_until_idle", "step"]
