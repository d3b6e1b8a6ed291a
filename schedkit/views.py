"""Engine-neutral, read-only views that hooks receive.

The protocols are what policies see: read-only to the type checker, and read-only at run
time on every engine (setting a field of a view an engine hands a policy raises
``AttributeError``): engines implement them with properties over their own objects
(``schedkit.sim.request.SimRequest``, ``schedkit.sim.view.SimEngineView``, the adapters'
views) and ``BlockSnapshot`` for blocks. ``RequestState``, ``EngineState`` and
``BlockState`` are plain records with settable fields, for tests and the conformance kit
(``schedkit.testing``) to build views from and change between calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class RequestView(Protocol):
    """One request, as a policy sees it."""

    @property
    def request_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def priority(self) -> int:
        """Lower value is served first (vLLM's convention)."""
        ...

    @property
    def arrival_time(self) -> float:
        """Seconds on the engine's clock."""
        ...

    @property
    def num_prompt_tokens(self) -> int: ...
    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens found in the prefix cache when the request was first admitted."""
        ...

    @property
    def num_computed_tokens(self) -> int: ...
    @property
    def num_output_tokens(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def slo_ttft_ms(self) -> float | None: ...
    @property
    def slo_tpot_ms(self) -> float | None: ...
    @property
    def num_preemptions(self) -> int: ...
    @property
    def block_hashes(self) -> Sequence[int]:
        """Hashes of the request's full blocks in token order, as the engine hashed them.

        Each is in the space of ``BlockView.block_hash``: a cached block whose hash is in
        ``set(request.block_hashes)`` holds a prefix of this request's prompt, which the
        request will hit if the block and every block before it are still cached when it
        is admitted. The prompt's full blocks are listed once the request arrives; engines
        that hash output as it is generated (vLLM) append those blocks too. Empty when
        the engine does not hash blocks (prefix caching off, or no hashes in a trace).
        Often the engine's own, growing sequence: copy what you keep, never mutate it.

        .. versionadded:: 0.2
        """
        ...


class EngineView(Protocol):
    """The engine as a policy sees it; the same object for the whole run."""

    @property
    def clock(self) -> float:
        """Seconds since the engine started (simulated time in the simulator)."""
        ...

    @property
    def kv_blocks_total(self) -> int: ...
    @property
    def kv_blocks_free(self) -> int:
        """Blocks that can be allocated now, cached-but-unreferenced ones included."""
        ...

    @property
    def block_size(self) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def step_index(self) -> int: ...

    def cached_tokens(self, request: RequestView) -> int:
        """Tokens of ``request`` (prompt, and output so far after a preemption) that the
        engine's prefix cache holds now: what admitting it now would skip computing, at
        most ``num_tokens - 1`` (the last is always computed). Looked up on each call, as
        the engine looks up at admission; 0 where prefix caching is off, and for a
        request this engine does not hold.

        .. versionadded:: 0.3
        """
        ...


class BlockView(Protocol):
    """A cached, unreferenced KV block that may be evicted."""

    @property
    def block_hash(self) -> int: ...
    @property
    def last_access(self) -> float:
        """Engine clock when the block was last freed or hit."""
        ...

    @property
    def num_hits(self) -> int:
        """How many times a request found this block in the prefix cache."""
        ...

    @property
    def depth(self) -> int:
        """Index of the block in its prompt (0 = first block of a prefix)."""
        ...

    @property
    def depth_class(self) -> int:
        """``depth.bit_length()``: 0 for a prefix's first block, then 1, 2 for depths
        2-3, 3 for 4-7, ... A key that reads depth only through its class lets engines
        rank a run of blocks a class at a time (``eviction_key_reads``)."""
        ...


class ReplicaView(Protocol):
    """One replica of a cluster, as a router sees it (``route_request``)."""

    @property
    def index(self) -> int:
        """Its place in the cluster, what ``route_request`` returns to choose it."""
        ...

    @property
    def role(self) -> str:
        """What it serves: ``"both"`` (an aggregated replica: prefill and decode),
        ``"prefill"`` or ``"decode"`` (an instance of a disaggregated deployment's pool;
        ``route_request`` is asked once per pool, with that pool's instances)."""
        ...

    @property
    def engine(self) -> EngineView:
        """Its engine's state as of its last finished step: running and waiting
        requests, free KV blocks."""
        ...

    def cached_tokens(self, request: RequestView) -> int:
        """Prompt tokens of ``request`` its prefix cache holds now (what a hit there
        would skip; at most ``prompt_tokens - 1``, as vLLM recomputes the last)."""
        ...


BLOCK_FIELDS = frozenset({"block_hash", "depth", "depth_class", "last_access", "num_hits"})
"""The fields of a ``BlockView`` (what ``Policy.eviction_key_reads`` may name)."""


class RequestState:
    """A ``RequestView`` with settable fields, for tests (engines hand out read-only ones)."""

    __slots__ = (
        "arrival_time",
        "block_hashes",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "priority",
        "request_id",
        "slo_tpot_ms",
        "slo_ttft_ms",
        "tenant",
    )

    def __init__(
        self,
        request_id: str,
        num_prompt_tokens: int,
        max_tokens: int,
        *,
        arrival_time: float = 0.0,
        tenant: str = "default",
        priority: int = 0,
        slo_ttft_ms: float | None = None,
        slo_tpot_ms: float | None = None,
        block_hashes: Sequence[int] = (),
    ) -> None:
        self.request_id = request_id
        self.tenant = tenant
        self.priority = priority
        self.arrival_time = arrival_time
        self.num_prompt_tokens = num_prompt_tokens
        self.num_cached_tokens = 0
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.max_tokens = max_tokens
        self.slo_ttft_ms = slo_ttft_ms
        self.slo_tpot_ms = slo_tpot_ms
        self.num_preemptions = 0
        self.block_hashes = block_hashes

    def __repr__(self) -> str:
        return _repr(self)


class EngineState:
    """An ``EngineView`` with settable fields, for tests (engines hand out read-only ones):
    ``cached`` maps a request id to the tokens its prefix cache holds (0 for any other)."""

    __slots__ = (
        "block_size",
        "cached",
        "clock",
        "kv_blocks_free",
        "kv_blocks_total",
        "num_running",
        "num_waiting",
        "step_index",
    )

    def __init__(self, kv_blocks_total: int, block_size: int) -> None:
        self.clock = 0.0
        self.kv_blocks_total = kv_blocks_total
        self.kv_blocks_free = kv_blocks_total
        self.block_size = block_size
        self.num_running = 0
        self.num_waiting = 0
        self.step_index = 0
        self.cached: dict[str, int] = {}

    def cached_tokens(self, request: RequestView) -> int:
        return self.cached.get(request.request_id, 0)

    def __repr__(self) -> str:
        return _repr(self)


class ReplicaState:
    """A ``ReplicaView`` with settable fields, for tests: ``cached`` maps a request id to
    the prompt tokens its prefix cache holds (0 for any other)."""

    __slots__ = ("cached", "engine", "index", "role")

    def __init__(
        self,
        index: int,
        engine: EngineView,
        cached: dict[str, int] | None = None,
        role: str = "both",
    ) -> None:
        self.index = index
        self.engine = engine
        self.cached = cached if cached is not None else {}
        self.role = role

    def cached_tokens(self, request: RequestView) -> int:
        return self.cached.get(request.request_id, 0)

    def __repr__(self) -> str:
        return f"ReplicaState({self.index}, {self.engine!r}, cached={self.cached!r})"


class BlockState:
    """A ``BlockView`` with settable fields, for tests; engines hand out ``BlockSnapshot``."""

    __slots__ = ("block_hash", "depth", "last_access", "num_hits")

    def __init__(self, block_hash: int, depth: int, last_access: float = 0.0) -> None:
        self.block_hash = block_hash
        self.depth = depth
        self.last_access = last_access
        self.num_hits = 0

    @property
    def depth_class(self) -> int:
        return self.depth.bit_length()

    def __repr__(self) -> str:
        return _repr(self)


class BlockSnapshot:
    """A read-only ``BlockView``: its fields are fixed when it is built.

    What an engine hands a policy as an eviction candidate: setting a field raises
    ``AttributeError``, as on vLLM and SGLang, so a policy cannot change the engine's
    record of the block. Build a new one when the block changes (freed, hit).

    .. versionadded:: 0.3
    """

    __slots__ = ("_block_hash", "_depth", "_last_access", "_num_hits")

    def __init__(
        self, block_hash: int, depth: int, last_access: float = 0.0, num_hits: int = 0
    ) -> None:
        self._block_hash = block_hash
        self._depth = depth
        self._last_access = last_access
        self._num_hits = num_hits

    @property
    def block_hash(self) -> int:
        return self._block_hash

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def depth_class(self) -> int:
        return self._depth.bit_length()

    @property
    def last_access(self) -> float:
        return self._last_access

    @property
    def num_hits(self) -> int:
        return self._num_hits

    def __repr__(self) -> str:
        return (
            f"BlockSnapshot(block_hash={self._block_hash!r}, depth={self._depth!r},"
            f" last_access={self._last_access!r}, num_hits={self._num_hits!r})"
        )


def _repr(obj: RequestState | EngineState | BlockState) -> str:
    fields = ", ".join(f"{name}={_short(getattr(obj, name))}" for name in type(obj).__slots__)
    return f"{type(obj).__name__}({fields})"


def _short(value: object) -> str:
    """A field's repr; a long hash list is shown by its length."""
    if isinstance(value, list | tuple) and len(value) > 4:
        return f"<{len(value)} hashes>"
    return repr(value)
