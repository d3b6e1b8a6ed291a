"""Random, internally consistent hook arguments (hypothesis), one hook at a time.

hypothesis is imported inside the functions, only when a check runs.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from schedkit.decisions import FINISH_REASONS, BatchBudget, StepReport
from schedkit.testing._subject import ConformanceError, _Subject
from schedkit.views import BlockState, EngineState, ReplicaState, RequestState

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn

# tenants for random states and for the stateful sequence (_sequence.py)
_TENANTS = ("default", "tenant-a", "tenant-b", "tenant-c")
# Prompts start with one of a few shared prefixes (system prompts, templates), so request
# block hashes and cached blocks' hashes meet; tokens per block of the hashes drawn here.
_PREFIXES = 4
_HASH_BLOCK_TOKENS = 16
_MAX_HASHED_BLOCKS = 64


def _prefix_hash(prefix: int, depth: int) -> int:
    """Hash of block ``depth`` of shared prefix ``prefix``: the same in every request."""
    return (prefix + 1) << 32 | depth


def _private_hash(request_id: str, depth: int) -> int:
    """Hash of a block only one request has (its prompt diverged from every prefix)."""
    digest = hashlib.blake2b(f"{request_id}/{depth}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") | 1 << 63  # never a _prefix_hash


def _request_hashes(request_id: str, num_blocks: int, prefix: int, shared: int) -> list[int]:
    """Block hashes of a prompt of ``num_blocks`` full blocks whose first ``shared``
    blocks are those of shared prefix ``prefix``."""
    shared = min(shared, num_blocks)
    return [_prefix_hash(prefix, d) for d in range(shared)] + [
        _private_hash(request_id, d) for d in range(shared, num_blocks)
    ]


def _check_hook(subject: _Subject, hook: str, max_examples: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    @seeded(subject.seed)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,  # the seed alone reproduces a run
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(st.composite(_ARGS[hook])())
    def run(args: tuple[Any, ...]) -> None:
        subject.check_call(hook, args)

    try:
        run()
    except Flaky as exc:
        inner = [e for e in getattr(exc, "exceptions", ()) if isinstance(e, ConformanceError)]
        detail = (
            f"\n{inner[0]}" if inner else f"\nreproduce with check_policy(..., seed={subject.seed})"
        )
        raise ConformanceError(
            f"policy {subject.name!r} fails the contract of hook {hook}: not deterministic:"
            " it failed on a state, then passed when the same state was replayed, so its"
            " answers depend on something besides its arguments and options (wall time,"
            f" global random state, ...){detail}"
        ) from exc


def _draw_clock(draw: DrawFn) -> float:
    from hypothesis import strategies as st

    return draw(st.floats(0.0, 100_000.0, allow_nan=False, allow_infinity=False))


def _draw_time(draw: DrawFn, clock: float) -> float:
    from hypothesis import strategies as st

    # sixteenths of the clock, so equal times (ties) are common
    return clock * draw(st.integers(0, 16)) / 16


def _draw_request(draw: DrawFn, request_id: str, clock: float, phase: str) -> RequestState:
    """A request that is "new", "waiting", "running", or finished by "stop" or "length"."""
    from hypothesis import strategies as st

    prompt = draw(st.integers(1, 8192))
    max_tokens = draw(st.integers(2 if phase == "running" else 1, 2048))
    request = RequestState(
        request_id,
        prompt,
        max_tokens,
        arrival_time=_draw_time(draw, clock),
        tenant=draw(st.sampled_from(_TENANTS)),
        priority=draw(st.integers(-3, 3)),
        slo_ttft_ms=draw(st.none() | st.floats(1.0, 60_000.0)),
        slo_tpot_ms=draw(st.none() | st.floats(1.0, 1_000.0)),
    )
    num_blocks = min(prompt // _HASH_BLOCK_TOKENS, _MAX_HASHED_BLOCKS)
    if num_blocks and draw(st.integers(0, 7)):  # an engine that hashes nothing, now and then
        prefix, shared = draw(st.integers(0, _PREFIXES - 1)), draw(st.integers(0, num_blocks))
        request.block_hashes = tuple(_request_hashes(request_id, num_blocks, prefix, shared))
    if phase == "new":
        return request
    request.num_preemptions = draw(st.integers(0, 3))
    if phase == "waiting":
        if request.num_preemptions:  # recompute preemption keeps the output, drops the KV
            request.num_cached_tokens = draw(st.integers(0, prompt - 1))
            request.num_output_tokens = draw(st.integers(0, max_tokens - 1))
        return request
    if phase == "running":  # computed < prompt: prefilling; else decoding
        request.num_computed_tokens = draw(st.integers(1, prompt + max_tokens - 2))
        request.num_output_tokens = max(0, request.num_computed_tokens - prompt + 1)
    else:
        output = max_tokens if phase == "length" else draw(st.integers(1, max_tokens))
        request.num_output_tokens = output
        request.num_computed_tokens = prompt + output - 1
    request.num_cached_tokens = draw(st.integers(0, min(request.num_computed_tokens, prompt) - 1))
    return request


def _draw_requests(
    draw: DrawFn, prefix: str, clock: float, phase: str, min_size: int, max_size: int
) -> list[RequestState]:
    from hypothesis import strategies as st

    size = draw(st.integers(min_size, max_size))
    return [_draw_request(draw, f"{prefix}{i}", clock, phase) for i in range(size)]


def _draw_engine(
    draw: DrawFn,
    clock: float,
    running: Sequence[RequestState],
    num_waiting: int,
    free: int | None = None,
) -> EngineState:
    from hypothesis import strategies as st

    block_size = draw(st.sampled_from((1, 16, 32)))
    used = sum(math.ceil(r.num_computed_tokens / block_size) for r in running)
    free = draw(st.integers(0, 4096)) if free is None else free
    engine = EngineState(max(used + free, 1), block_size)
    engine.kv_blocks_free = engine.kv_blocks_total - used
    engine.clock = clock
    engine.num_running = len(running)
    engine.num_waiting = num_waiting
    engine.step_index = draw(st.integers(0, 1_000_000))
    return engine


def _admit_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    request = _draw_request(draw, "new", clock, "new")
    request.arrival_time = clock
    return (request, _draw_engine(draw, clock, running, draw(st.integers(0, 64))))


def _order_args(draw: DrawFn) -> tuple[Any, ...]:
    clock = _draw_clock(draw)
    waiting = _draw_requests(draw, "w", clock, "waiting", 1, 24)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    return (waiting, _draw_engine(draw, clock, running, len(waiting)))


def _plan_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 64)))
    token_budget = draw(st.integers(1, 65_536))
    chunk = draw(st.just(0) | st.integers(1, token_budget))
    return (engine, BatchBudget(token_budget, draw(st.integers(1, 1024)), chunk))


def _victims_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 1, 16)
    needing = running[draw(st.integers(0, len(running) - 1))]
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 16)), draw(st.integers(0, 2)))
    return (running, needing, engine)


def _evictions_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    # blocks of the shared prefixes, which generated requests' block_hashes list, or others
    shared = st.builds(
        lambda prefix, depth: (_prefix_hash(prefix, depth), depth),
        st.integers(0, _PREFIXES - 1),
        st.integers(0, _MAX_HASHED_BLOCKS - 1),
    )
    other = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 63))
    keys = st.lists(shared | other, min_size=1, max_size=24, unique_by=lambda key: key[0])
    blocks = []
    for block_hash, depth in draw(keys):
        block = BlockState(block_hash, depth, _draw_time(draw, clock))
        block.num_hits = draw(st.integers(0, 50))
        blocks.append(block)
    blocks.sort(key=lambda b: b.last_access)  # least recently used first
    running = _draw_requests(draw, "r", clock, "running", 0, 4)
    # called when no never-cached block is left: the free blocks are the candidates
    engine = _draw_engine(draw, clock, running, draw(st.integers(0, 16)), len(blocks))
    return (blocks, draw(st.integers(1, len(blocks))), engine)


def _waiting_key_args(draw: DrawFn) -> tuple[Any, ...]:
    waiting, engine = _order_args(draw)
    return (waiting[0], engine)


def _victim_key_args(draw: DrawFn) -> tuple[Any, ...]:
    running, _, engine = _victims_args(draw)
    return (running[0], engine)


def _eviction_key_args(draw: DrawFn) -> tuple[Any, ...]:
    candidates, _, engine = _evictions_args(draw)
    return (candidates[0], engine)


def _step_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    running = _draw_requests(draw, "r", clock, "running", 0, 12)
    waiting = _draw_requests(draw, "w", clock, "waiting", 0, 8)
    num_steps = draw(st.integers(1, 8))  # > 1 only for a run of decode steps
    eligible = [r for r in running if num_steps == 1 or r.num_output_tokens >= num_steps]
    mask = draw(st.lists(st.booleans(), min_size=len(eligible), max_size=len(eligible)))
    scheduled = [r for r, keep in zip(eligible, mask, strict=True) if keep]
    tokens = [
        num_steps if r.num_output_tokens else draw(st.integers(1, r.num_computed_tokens))
        for r in scheduled
    ]
    decode = sum(n for r, n in zip(scheduled, tokens, strict=True) if r.num_output_tokens)
    report = StepReport(
        num_steps=num_steps,
        duration_s=draw(st.floats(1e-4, 10.0)),
        num_prefill_tokens=sum(tokens) - decode,
        num_decode_tokens=decode,
        scheduled=tuple(scheduled),
        num_scheduled_tokens=tuple(tokens),
        preempted=tuple(r for r in waiting if r.num_preemptions and draw(st.booleans())),
    )
    return (report, _draw_engine(draw, clock, running, len(waiting)))


def _finished_args(draw: DrawFn) -> tuple[Any, ...]:
    from hypothesis import strategies as st

    clock = _draw_clock(draw)
    reason = draw(st.sampled_from(FINISH_REASONS))
    phase = {"rejected": "new", "stop": "stop", "length": "length"}.get(reason)
    phase = phase or draw(st.sampled_from(("waiting", "running")))
    request = _draw_request(draw, "done", clock, phase)
    running = _draw_requests(draw, "r", clock, "running", 0, 8)
    return (request, reason, _draw_engine(draw, clock, running, draw(st.integers(0, 16))))


def _route_args(draw: DrawFn) -> tuple[Any, ...]:
    """A new request and 1-8 replicas of one pool (aggregated replicas, or a
    disaggregated deployment's prefill or decode instances), each with its own engine
    and a share of the prompt cached (whole blocks, at most ``prompt - 1`` tokens)."""
    from hypothesis import strategies as st

    request, _ = _admit_args(draw)
    role = draw(st.sampled_from(("both", "prefill", "decode")))
    if role == "prefill":  # as vLLM's disaggregated proxy sends it
        request.max_tokens = 1
    replicas = []
    for i in range(draw(st.integers(1, 8))):
        clock = request.arrival_time
        running = _draw_requests(draw, f"r{i}-", clock, "running", 0, 4)
        engine = _draw_engine(draw, clock, running, draw(st.integers(0, 32)))
        cached = draw(st.integers(0, max(0, request.num_prompt_tokens - 1)))
        cached -= cached % engine.block_size
        replicas.append(ReplicaState(i, engine, {request.request_id: cached}, role))
    return (request, replicas)


_ARGS: dict[str, Callable[[DrawFn], tuple[Any, ...]]] = {
    "on_request_arrived": _admit_args,
    "admit_request": _admit_args,
    "order_waiting": _order_args,
    "plan_batch": _plan_args,
    "select_victims": _victims_args,
    "select_evictions": _evictions_args,
    "route_request": _route_args,
    "waiting_key": _waiting_key_args,
    "victim_key": _victim_key_args,
    "eviction_key": _eviction_key_args,
    "on_step_finished": _step_args,
    "on_request_finished": _finished_args,
}
