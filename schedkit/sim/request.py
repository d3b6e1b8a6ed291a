"""A request inside the simulated engine: the policy-facing, read-only view plus engine state."""

from __future__ import annotations

from itertools import chain
from typing import Protocol

from schedkit.records import RequestRecord
from schedkit.sim.kv.blocks import BlockTable, blocks_for, group_key, own_block_hash


class Lane(Protocol):
    """What a request reads of the decode lane it is in (``schedkit.sim.lane``)."""

    @property
    def steps(self) -> int: ...


class TraceLike(Protocol):
    """What the engine needs of a trace request (``schedkit.workload.TraceRequest``)."""

    @property
    def request_id(self) -> str: ...
    @property
    def arrival_s(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def tenant(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def slo_ttft_ms(self) -> float | None: ...
    @property
    def slo_tpot_ms(self) -> float | None: ...
    @property
    def hash_ids(self) -> tuple[int, ...]: ...
    @property
    def deadline_s(self) -> float | None: ...


def record_of(trace: TraceLike) -> RequestRecord:
    """A new record of ``trace``'s request, yet to arrive."""
    return RequestRecord(
        request_id=trace.request_id,
        tenant=trace.tenant,
        priority=trace.priority,
        arrival_s=trace.arrival_s,
        prompt_tokens=max(1, trace.prompt_tokens),
        max_tokens=max(1, trace.output_tokens),
        slo_ttft_ms=trace.slo_ttft_ms,
        slo_tpot_ms=trace.slo_tpot_ms,
        deadline_s=trace.deadline_s,
    )


class SimRequest:
    """A request inside the simulated engine, and the ``RequestView`` policies get for it.

    The view's fields are read-only properties, so a policy that sets one gets an
    ``AttributeError``, as on vLLM and SGLang (whose views are properties over the
    engine's request). The fields fixed at arrival are read from ``record``; the ones
    that change live in the underscored slots behind their properties, which only the
    engine writes (``schedkit.sim``: it reads them there too, saving a call per access).

    Its blocks are in ``blocks``, a ``BlockTable`` the KV cache keeps. ``block_hashes``
    is set by the engine from ``hash_blocks`` when the request arrives and when it is
    preempted, and emptied when it leaves.
    """

    __slots__ = (
        "_block_hashes",
        "_hashed",
        "_lane",
        "_lane_base",
        "_lane_own",
        "_lane_phase",
        "_num_cached_tokens",
        "_num_computed_tokens",
        "_num_output_tokens",
        "_num_preemptions",
        "_seq",
        "blocks",
        "index",
        "last_token_s",
        "lost_tokens",
        "num_tokens",
        "per_group",
        "record",
    )

    def __init__(
        self,
        index: int,
        record: RequestRecord,
        hash_ids: tuple[int, ...],
        per_group: int,
        block_size: int,
    ) -> None:
        self.index = index
        self.record = record
        self._num_cached_tokens = 0
        self._num_computed_tokens = 0
        self._num_output_tokens = 0
        self._num_preemptions = 0
        self._block_hashes: tuple[int, ...] | None = ()  # None: to be listed (``_hashed``)
        self._hashed = (0, 0)  # the tokens and block size its hashes are listed for
        self.num_tokens = record.prompt_tokens  # prompt + generated so far
        self.per_group = per_group  # engine blocks per trace hash id; 0 = nothing shared
        num_shared = min(len(hash_ids) * per_group, record.prompt_tokens // block_size)
        groups = (
            tuple(group_key(h) for h in hash_ids[: blocks_for(num_shared, per_group)])
            if num_shared
            else ()
        )
        self.blocks = BlockTable(-(index + 1), groups, num_shared)
        self.lost_tokens = 0  # computed tokens thrown away by the last preemption
        self.last_token_s = 0.0
        # a member of the engine's decode lane (sim/lane.py) reads its counts through it
        self._lane: Lane | None = None
        self._lane_base = self._lane_phase = 0
        self._lane_own = False
        self._seq = 0  # its place in the running order (the engine's admissions counted)

    @classmethod
    def from_trace(
        cls, index: int, trace: TraceLike, block_size: int, hash_block_tokens: int
    ) -> SimRequest:
        record = record_of(trace)
        shared = hash_block_tokens > 0 and hash_block_tokens % block_size == 0 and trace.hash_ids
        per_group = hash_block_tokens // block_size if shared else 0
        return cls(index, record, trace.hash_ids if shared else (), per_group, block_size)

    def mark_hashes(self, block_size: int) -> None:
        """``block_hashes`` is ``hash_blocks(block_size)`` as of now, listed when first
        read (only a policy reads it: most runs never list a request's thousands)."""
        self._block_hashes = None
        self._hashed = (self.num_tokens, block_size)

    def forget_hashes(self) -> None:
        """``block_hashes`` is empty from now on (a finished request no policy reads)."""
        self._block_hashes = ()
        self._hashed = (0, 0)

    def hash_blocks(self, block_size: int, num_tokens: int | None = None) -> tuple[int, ...]:
        """Hashes of its full blocks so far (or of its first ``num_tokens``), as the
        prefix cache names them: the shared blocks' (group and block within it), then its
        own (``own_block_hash``), which only it can hit again, after a preemption. Output
        blocks count once generated, as in vLLM."""
        table, per = self.blocks, self.per_group
        shared = tuple(chain.from_iterable(range(g * per, g * per + per) for g in table.groups))
        if len(shared) > table.num_shared:  # the last group only in part
            shared = shared[: table.num_shared]
        tokens = self.num_tokens if num_tokens is None else num_tokens
        num_own = tokens // block_size - table.num_shared
        if num_own <= 0:
            return shared
        first = own_block_hash(table.key, 0)
        return shared + tuple(range(first, first - num_own, -1))

    # -- the RequestView: read-only -------------------------------------------------

    @property
    def request_id(self) -> str:
        return self.record.request_id

    @property
    def tenant(self) -> str:
        return self.record.tenant

    @property
    def priority(self) -> int:
        return self.record.priority

    @property
    def arrival_time(self) -> float:
        return self.record.arrival_s

    @property
    def num_prompt_tokens(self) -> int:
        return self.record.prompt_tokens

    @property
    def max_tokens(self) -> int:
        return self.record.max_tokens

    @property
    def slo_ttft_ms(self) -> float | None:
        return self.record.slo_ttft_ms

    @property
    def slo_tpot_ms(self) -> float | None:
        return self.record.slo_tpot_ms

    @property
    def num_cached_tokens(self) -> int:
        return self._num_cached_tokens

    @property
    def num_computed_tokens(self) -> int:
        lane = self._lane
        if lane is None:
            return self._num_computed_tokens
        return self._num_computed_tokens + lane.steps - self._lane_base

    @property
    def num_output_tokens(self) -> int:
        lane = self._lane
        if lane is None:
            return self._num_output_tokens
        return self._num_output_tokens + lane.steps - self._lane_base

    @property
    def num_preemptions(self) -> int:
        return self._num_preemptions

    @property
    def block_hashes(self) -> tuple[int, ...]:
        hashes = self._block_hashes
        if hashes is None:
            tokens, block_size = self._hashed
            hashes = self._block_hashes = self.hash_blocks(block_size, tokens)
        return hashes

    def __repr__(self) -> str:
        return (
            f"SimRequest({self.request_id!r}, computed={self.num_computed_tokens},"
            f" output={self.num_output_tokens}/{self.max_tokens},"
            f" preemptions={self._num_preemptions}, blocks={self.blocks.nblocks})"
        )
