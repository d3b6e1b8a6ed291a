"""vLLM 0.34's waiting queues against schedkit's ``order_waiting``, per release.

vLLM 0.34 adds two things that touch the waiting queue schedkit orders:

- cache-aware admission (``--cache-aware-admission-window N``, default 0 = off, FCFS mode
  with prefix caching only): inside ``schedule()``, before admitting, vLLM moves the
  waiting requests with the deepest cached prefix to the front of the first N. That runs
  after the policy's ``order_waiting``, so it overrides the policy's order;
- a third waiting queue, ``async_kv_waiting`` (with a KV connector and
  ``--max-num-inflight-kv-loads``: requests whose KV the connector may load
  asynchronously), counted in ``get_request_counts()``.

The model-less scheduler here has no model and no workers; token ids and model outputs
are built as in ``schedkit_vllm.harness.modelless``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import vllm
from conftest import BLOCK_SIZE, make_request

from schedkit_vllm.compat import parse_version
from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output

AT_LEAST_034 = parse_version(vllm.__version__)[:2] >= (0, 34)
needs_034 = pytest.mark.skipif(
    not AT_LEAST_034, reason=f"cache-aware admission is new in vLLM 0.34 ({vllm.__version__})"
)

PREFIX = list(range(100, 100 + 4 * BLOCK_SIZE))  # four full blocks, cached by "warm"


def _admitted(scheduler: Any) -> list[str]:
    """Run until idle; the requests in the order vLLM first scheduled them."""
    order: list[str] = []
    for _ in range(200):
        if not scheduler.has_requests():
            return order
        output = scheduler.schedule()
        order += [new.req_id for new in output.scheduled_new_reqs]
        ids = list(output.num_scheduled_tokens)
        requests = scheduler.requests
        sampled = [
            [7] if requests[rid].num_computed_tokens >= requests[rid].num_tokens else []
            for rid in ids
        ]
        scheduler.update_from_output(output, model_runner_output(ids, sampled))
    raise AssertionError("scheduler still busy after 200 steps")


def _cached_before_short(model_dir: Path, schedkit: dict[str, Any] | None, window: int) -> Any:
    """One request at a time (max_num_seqs=1). "warm" caches PREFIX; then "cached"
    (PREFIX plus 40 tokens) arrives before "short" (20 tokens, nothing cached)."""
    scheduler = build_scheduler(
        num_blocks=64,
        block_size=BLOCK_SIZE,
        max_num_seqs=1,
        model_dir=model_dir,
        schedkit=schedkit,
        scheduler_options={
            "cache_aware_admission_window": window,
            "cache_aware_admission_threshold": 0.0,  # whatever the KV usage
        },
    )
    scheduler.add_request(make_request("warm", [*PREFIX, 1, 2], max_tokens=2))
    assert _admitted(scheduler) == ["warm"]
    scheduler.add_request(make_request("cached", [*PREFIX, *range(700, 740)], arrival_time=1.0))
    scheduler.add_request(make_request("short", list(range(500, 520)), arrival_time=2.0))
    return scheduler


@needs_034
def test_the_policy_orders_the_waiting_queue_without_cache_aware_admission(
    model_dir: Path,
) -> None:
    stock = _cached_before_short(model_dir, None, window=0)
    assert _admitted(stock) == ["cached", "short"]  # FCFS
    ours = _cached_before_short(model_dir, {"policy": ["shortest-prompt"]}, window=0)
    assert _admitted(ours) == ["short", "cached"]


@needs_034
def test_vllm_cache_aware_admission_puts_the_cached_prefix_first(model_dir: Path) -> None:
    """Pins vLLM's behaviour: the cached request first (it also arrived first here, so
    the window is checked to be on and to order by cached tokens below)."""
    stock = _cached_before_short(model_dir, None, window=8)
    assert stock.cache_aware_window == 8
    counts = {r.request_id: stock.kv_cache_manager.get_num_cached_tokens(r) for r in stock.waiting}
    assert counts == {"cached": len(PREFIX), "short": 0}
    assert _admitted(stock) == ["cached", "short"]


@needs_034
def test_a_policy_order_is_not_overridden_by_cache_aware_admission(model_dir: Path) -> None:
    ours = _cached_before_short(model_dir, {"policy": ["shortest-prompt"]}, window=8)
    assert _admitted(ours) == ["short", "cached"]


def test_engine_view_counts_every_waiting_queue(model_dir: Path) -> None:
    """``num_waiting`` is vLLM's own count (``get_request_counts``), which takes in
    ``async_kv_waiting`` from 0.34 on."""
    scheduler = build_scheduler(
        num_blocks=64,
        block_size=BLOCK_SIZE,
        model_dir=model_dir,
        schedkit={"policy": ["shortest-prompt"]},
    )
    for i in range(3):
        scheduler.add_request(make_request(f"r{i}", 20 + i))
    assert scheduler.schedkit.engine.num_waiting == scheduler.get_request_counts()[1] == 3
    assert hasattr(scheduler, "async_kv_waiting") is AT_LEAST_034
