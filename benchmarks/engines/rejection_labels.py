"""Prometheus series after 1,000 distinct rejection texts, through the real vLLM scheduler.

A policy rejects every request and quotes the client's tenant in the reason (as a policy
naming the over-quota tenant would), so every client chooses its own reason text. The
script counts the ``schedkit_rejections_total`` series the scheduler process then holds
and the rejection texts its runtime keeps. Run it on this tree and on an older one::

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/engines/rejection_labels.py
    git worktree add /tmp/schedkit-before <commit>
    HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/schedkit-before .venv-vllm/bin/python \\
        benchmarks/engines/rejection_labels.py
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY
from schedkit_vllm.harness.modelless import build_scheduler, stub_model_dir

from schedkit import Admission, EngineView, Policy, PolicyRegistry, RequestView, hookimpl
from schedkit.plugins import PolicyEntry

TEXTS = 1000
BLOCK_SIZE = 16


class RejectEchoing(Policy):
    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject(f"tenant {request.tenant} over quota")


def letters(i: int) -> str:
    return "".join(chr(97 + int(d)) for d in f"{i:04d}")


def make_request(i: int, hasher: Any) -> Any:
    """A 20-token request with 8 output tokens from tenant ``letters(i)``."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=8, ignore_eos=True, extra_args={"tenant": letters(i)})
    tokens = [(t + i * 7) % 2000 + 1 for t in range(1, 21)]  # distinct prompts
    return Request(f"e{i}", tokens, params, pooling_params=None, block_hasher=hasher)


def run_until_idle(scheduler: Any, max_steps: int = 2000) -> None:
    """Step the model-less scheduler as ``EngineCore.step`` does, a token per request whose
    prompt is done, until no request is left."""
    from vllm.v1.outputs import ModelRunnerOutput

    for _ in range(max_steps):
        if not scheduler.has_requests():
            return
        output = scheduler.schedule()
        ids = list(output.num_scheduled_tokens)
        requests = scheduler.requests
        sampled = [[] if requests[r].is_prefill_chunk else [7] for r in ids]
        scheduler.update_from_output(
            output,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={r: k for k, r in enumerate(ids)},
                sampled_token_ids=sampled,
            ),
        )
    raise RuntimeError(f"scheduler still busy after {max_steps} steps")


def main() -> None:
    base = PolicyRegistry.discover.__func__  # type: ignore[attr-defined]

    def discover(cls: type[PolicyRegistry]) -> PolicyRegistry:
        extra = PolicyEntry("reject-echoing", "bench", "0", "bench:x", _loaded=RejectEchoing)
        return PolicyRegistry([*base(cls).entries(), extra])

    PolicyRegistry.discover = classmethod(discover)  # type: ignore[method-assign, assignment]
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name("sha256_cbor")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
    model = stub_model_dir(2048)
    scheduler = build_scheduler(
        num_blocks=200, block_size=BLOCK_SIZE, max_num_seqs=16, max_num_batched_tokens=512,
        prefix_caching=True, policy="fcfs", schedkit={"policy": ["reject-echoing"]},
        cls=None, model_dir=model,
    )  # fmt: skip
    for i in range(TEXTS):
        scheduler.add_request(make_request(i, hasher))
    run_until_idle(scheduler)
    series = sum(
        1
        for metric in REGISTRY.collect()
        for s in metric.samples
        if s.name == "schedkit_rejections_total" and s.labels.get("policy") == "reject-echoing"
    )
    kept = len(scheduler.schedkit.rejections)
    print(f"{TEXTS} distinct rejection texts: {series} schedkit_rejections_total series,")
    print(f"{kept} texts kept by the scheduler's runtime")


if __name__ == "__main__":
    main()
