"""A request inside the simulated engine: the policy-facing view plus engine state."""

from __future__ import annotations

from itertools import chain
from typing import Protocol

from schedkit.records import RequestRecord
from schedkit.sim.blocks import BlockTable, blocks_for, group_key, own_block_hash
from schedkit.views import RequestState


class TraceLike(Protocol):
    """What the engine needs of a trace request (``schedkit.sim.workloads.TraceRequest``)."""

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


class SimRequest(RequestState):
    """``RequestState`` plus what the simulator tracks; policies see only the view.

    Its blocks are in ``blocks``, a ``BlockTable`` the KV cache keeps. ``block_hashes``
    (the view's) is set by the engine from ``hash_blocks`` when the request arrives and
    when it is preempted, and emptied when it leaves.
    """

    __slots__ = (
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
        super().__init__(
            record.request_id,
            record.prompt_tokens,
            record.max_tokens,
            arrival_time=record.arrival_s,
            tenant=record.tenant,
            priority=record.priority,
            slo_ttft_ms=record.slo_ttft_ms,
            slo_tpot_ms=record.slo_tpot_ms,
        )
        self.index = index
        self.record = record
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

    @classmethod
    def from_trace(
        cls, index: int, trace: TraceLike, block_size: int, hash_block_tokens: int
    ) -> SimRequest:
        record = RequestRecord(
            request_id=trace.request_id,
            tenant=trace.tenant,
            priority=trace.priority,
            arrival_s=trace.arrival_s,
            prompt_tokens=max(1, trace.prompt_tokens),
            max_tokens=max(1, trace.output_tokens),
            slo_ttft_ms=trace.slo_ttft_ms,
            slo_tpot_ms=trace.slo_tpot_ms,
        )
        shared = hash_block_tokens > 0 and hash_block_tokens % block_size == 0 and trace.hash_ids
        per_group = hash_block_tokens // block_size if shared else 0
        return cls(index, record, trace.hash_ids if shared else (), per_group, block_size)

    def hash_blocks(self, block_size: int) -> tuple[int, ...]:
        """Hashes of its full blocks so far, as the prefix cache names them: the shared
        blocks' (group and block within it), then its own (``own_block_hash``), which only
        it can hit again, after a preemption. Output blocks count once generated, as in
        vLLM."""
        table, per = self.blocks, self.per_group
        shared = tuple(chain.from_iterable(range(g * per, g * per + per) for g in table.groups))
        if len(shared) > table.num_shared:  # the last group only in part
            shared = shared[: table.num_shared]
        num_own = self.num_tokens // block_size - table.num_shared
        if num_own <= 0:
            return shared
        first = own_block_hash(table.key, 0)
        return shared + tuple(range(first, first - num_own, -1))
