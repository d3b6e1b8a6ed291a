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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "vllm" / "tests"))

from conftest import make_request, run_until_idle
from prometheus_client import REGISTRY
from schedkit_vllm.modelless import build_scheduler, stub_model_dir

from schedkit import Admission, EngineView, Policy, PolicyRegistry, RequestView, hookimpl
from schedkit.plugins import PolicyEntry

TEXTS = 1000


class RejectEchoing(Policy):
    @hookimpl
    def admit_request(self, request: RequestView, engine: EngineView) -> Admission | None:
        return Admission.reject(f"tenant {request.tenant} over quota")


def letters(i: int) -> str:
    return "".join(chr(97 + int(d)) for d in f"{i:04d}")


def main() -> None:
    base = PolicyRegistry.discover.__func__  # type: ignore[attr-defined]

    def discover(cls: type[PolicyRegistry]) -> PolicyRegistry:
        extra = PolicyEntry("reject-echoing", "bench", "0", "bench:x", _loaded=RejectEchoing)
        return PolicyRegistry([*base(cls).entries(), extra])

    PolicyRegistry.discover = classmethod(discover)  # type: ignore[method-assign, assignment]
    model = stub_model_dir(2048)
    scheduler = build_scheduler(
        num_blocks=200, block_size=16, max_num_seqs=16, max_num_batched_tokens=512,
        prefix_caching=True, policy="fcfs", schedkit={"policy": ["reject-echoing"]},
        cls=None, model_dir=model,
    )  # fmt: skip
    for i in range(TEXTS):
        scheduler.add_request(make_request(f"e{i}", 20, tenant=letters(i)))
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
