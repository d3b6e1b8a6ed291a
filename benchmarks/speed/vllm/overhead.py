"""Scheduler overhead of schedkit-vllm against stock vLLM, side by side in one run.

Times ``schedule()`` + ``update_from_output()`` on the real vLLM V1 scheduler with no
model (the fabricated ``ModelRunnerOutput`` of vLLM's own scheduler tests) while 256
requests run. Four arms, each its own scheduler fed the identical seeded workload:

- ``stock``: ``vllm.v1.core.sched.scheduler.Scheduler``
- ``no-config``: ``schedkit_vllm.Scheduler`` with no schedkit config (stock path)
- ``fcfs``: ``schedkit_vllm.Scheduler`` with ``{"policy": ["fcfs"]}`` (the default policy)
- ``fcfs-record``: ``fcfs`` recording every step (``record_steps``, for calibration)
- ``priority``: ``{"policy": ["priority"]}`` (an ordering plus victim policy)
- ``stock-priority``: vLLM's scheduler in ``--scheduling-policy priority`` mode, the
  baseline of ``priority``: schedkit's ``priority`` reproduces it, so both schedule the
  same batches and the ratio is the adapter's overhead alone (against ``stock`` the
  ``priority`` arm also pays for scheduling other requests than FCFS would)
- ``async-stock``, ``async-stock-priority``, ``async-fcfs``, ``async-priority``: the same on vLLM's
  ``AsyncScheduler`` and ``schedkit_vllm.AsyncScheduler`` (the GPU default), driven as
  ``EngineCore.step_with_batch_queue`` does: a batch queue of 2, so each timed step is
  one ``schedule()`` plus the ``update_from_output()`` of the step before it.

Each arm's ratio is against its ``baseline``.

Workload: 256 running requests (64-token prompts, 64-192 output tokens, seeded), every
finished request replaced by a new one, so about two requests finish, arrive and get
prefilled each step and the waiting queue is non-empty at every step. KV blocks are
plentiful (no preemption). Each round times a batch of steps on every arm, in a shuffled
order, so machine noise falls on all arms alike; the figure per arm is the median over
rounds of the mean step time, and the ratio is the median of per-round ratios.

    HF_HUB_OFFLINE=1 taskset -c 0 .venv-vllm/bin/python benchmarks/speed/vllm/overhead.py

``--profile ARM`` adds a cProfile listing of that arm's timed steps.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("SCHEDKIT_CONFIG", None)

BLOCK_SIZE = 16
PROMPT = 64
RECORD_FILE = Path(tempfile.gettempdir()) / "schedkit-overhead-steps.csv"
ARMS: dict[str, dict[str, Any] | None] = {
    "stock": None,
    "stock-priority": None,
    "no-config": None,
    "fcfs": {"policy": ["fcfs"]},
    # fcfs writing every step to a file (record_steps, for schedkit calibrate)
    "fcfs-record": {"policy": ["fcfs"], "record_steps": str(RECORD_FILE)},
    "priority": {"policy": ["priority"]},
    "async-stock": None,
    "async-stock-priority": None,
    "async-fcfs": {"policy": ["fcfs"]},
    "async-priority": {"policy": ["priority"]},
}


def baseline(arm: str) -> str:
    """The stock arm that schedules the same batches: vLLM's priority mode for schedkit's
    ``priority`` (which reproduces it), vLLM's default FCFS for the rest."""
    prefix = "async-" if arm.startswith("async") else ""
    return prefix + ("stock-priority" if arm.endswith("priority") else "stock")


def build_scheduler(arm: str, model_dir: Path, running: int) -> Any:
    from schedkit_vllm import AsyncScheduler, Scheduler
    from schedkit_vllm.harness.modelless import build_scheduler as build
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    stock = VllmAsyncScheduler if arm.startswith("async") else VllmScheduler
    ours = AsyncScheduler if arm.startswith("async") else Scheduler
    return build(
        num_blocks=running * 32,
        block_size=BLOCK_SIZE,
        max_num_seqs=running,
        max_num_batched_tokens=8192,
        schedkit=ARMS[arm],
        cls=stock if "stock" in arm else ours,
        policy="priority" if arm.endswith("stock-priority") else "fcfs",
        model_dir=model_dir,
    )


@dataclass
class Arm:
    """One scheduler and the request stream feeding it (identical across arms)."""

    name: str
    scheduler: Any
    make_request: Callable[[str, random.Random], Any]
    rng: random.Random = field(default_factory=lambda: random.Random(1234))
    next_id: int = 0
    times_ns: list[float] = field(default_factory=list)  # mean step time per round
    in_flight: list[tuple[Any, Any]] = field(default_factory=list)  # async: batch queue

    @property
    def depth(self) -> int:
        return 2 if self.name.startswith("async") else 1

    def add(self, n: int) -> None:
        for _ in range(n):
            self.scheduler.add_request(self.make_request(f"r{self.next_id}", self.rng))
            self.next_id += 1

    def step(self) -> int:
        """One timed step; returns its duration in ns. Refills finished requests."""
        from vllm.v1.outputs import ModelRunnerOutput

        scheduler = self.scheduler
        t0 = time.perf_counter_ns()
        output = scheduler.schedule()
        t1 = time.perf_counter_ns()
        ids = list(output.num_scheduled_tokens)
        requests = scheduler.requests
        # What a worker samples: a token for every request vLLM did not mark a prefill
        # chunk when scheduling it (sync: the same as "its prompt is complete").
        sampled = [[] if requests[r].is_prefill_chunk else [7] for r in ids]
        model_output = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        self.in_flight.insert(0, (output, model_output))
        if len(self.in_flight) < self.depth:
            return t1 - t0
        done, done_output = self.in_flight.pop()
        t2 = time.perf_counter_ns()
        engine_outputs = scheduler.update_from_output(done, done_output)
        t3 = time.perf_counter_ns()
        finished = sum(
            out.finish_reason is not None
            for bundle in engine_outputs.values()
            for out in bundle.outputs
        )
        self.add(finished)
        return (t1 - t0) + (t3 - t2)


def request_factory() -> Callable[[str, random.Random], Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hash_fn = get_hash_fn_by_name("sha256_cbor")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)

    def make(request_id: str, rng: random.Random) -> Any:
        tokens = [rng.randrange(1, 2000) for _ in range(PROMPT)]
        params = SamplingParams(
            max_tokens=rng.randrange(64, 193),
            ignore_eos=True,
            extra_args={"tenant": f"t{rng.randrange(4)}"},
        )
        return Request(
            request_id,
            tokens,
            params,
            pooling_params=None,
            block_hasher=hasher,
            priority=rng.randrange(4),
        )

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=25, help="timed steps per arm per round")
    parser.add_argument("--warmup", type=int, default=200, help="untimed steps per arm")
    parser.add_argument("--profile", choices=list(ARMS), default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    t_import = time.perf_counter()
    import schedkit_vllm
    import vllm

    print(f"vllm {vllm.__version__}, schedkit-vllm {schedkit_vllm.__version__}", end="")
    print(f" (import {time.perf_counter() - t_import:.1f} s)")
    model_dir = Path(tempfile.mkdtemp(prefix="schedkit-overhead-"))
    (model_dir / "config.json").write_text(
        json.dumps(
            {
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
        )
    )
    make = request_factory()
    arms = [Arm(name, build_scheduler(name, model_dir, args.running), make) for name in ARMS]
    for arm in arms:
        arm.add(args.running)
        for _ in range(args.warmup):
            arm.step()
    profiler = cProfile.Profile() if args.profile else None
    order = list(arms)
    shuffle = random.Random(99)
    running_seen: dict[str, list[int]] = {a.name: [] for a in arms}
    for _ in range(args.rounds):
        shuffle.shuffle(order)
        for arm in order:
            gc.collect()
            profiling = profiler is not None and arm.name == args.profile
            if profiling:
                profiler.enable()  # type: ignore[union-attr]
            total = 0
            for _ in range(args.steps):
                total += arm.step()
            if profiling:
                profiler.disable()  # type: ignore[union-attr]
            arm.times_ns.append(total / args.steps)
            running_seen[arm.name].append(len(arm.scheduler.running))

    by_name = {a.name: a for a in arms}
    print(
        f"\n{args.running} running, {args.rounds} rounds x {args.steps} steps per arm,"
        f" interleaved; per step, schedule() + update_from_output()"
    )
    print(
        f"{'arm':<10} {'median ms':>10} {'min ms':>8} {'ratio: median of rounds':>24} {'of mins':>8}"
    )
    figures: dict[str, dict[str, float]] = {}
    for arm in arms:
        stock = by_name[baseline(arm.name)]
        ratios = [a / b for a, b in zip(arm.times_ns, stock.times_ns, strict=True)]
        figures[arm.name] = {
            "median_ms": statistics.median(arm.times_ns) / 1e6,
            "min_ms": min(arm.times_ns) / 1e6,
            "ratio_median": statistics.median(ratios),
            "ratio_of_medians": statistics.median(arm.times_ns) / statistics.median(stock.times_ns),
            "ratio_of_mins": min(arm.times_ns) / min(stock.times_ns),
            "running_min": min(running_seen[arm.name]),
        }
        f = figures[arm.name]
        print(
            f"{arm.name:<10} {f['median_ms']:>10.3f} {f['min_ms']:>8.3f}"
            f" {f['ratio_median']:>12.3f}x {baseline(arm.name):<11} {f['ratio_of_mins']:>7.3f}x"
        )
    priority, stock = by_name["priority"], by_name["stock"]
    pairs = zip(priority.times_ns, stock.times_ns, strict=True)
    vs_fcfs = statistics.median(a / b for a, b in pairs)
    print(f"priority against FCFS stock (other batches): {vs_fcfs:.3f}x")
    print(f"running at the end of each batch: min {min(min(v) for v in running_seen.values())}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    if profiler is not None:
        print(f"\ncProfile of the timed steps of {args.profile!r} (includes output fabrication):")
        stats = pstats.Stats(profiler).sort_stats("cumulative")
        stats.print_stats(30)
        print("schedkit's own functions:")
        stats.sort_stats("tottime").print_stats("schedkit", 20)


if __name__ == "__main__":
    main()
