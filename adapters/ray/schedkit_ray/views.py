"""What a schedkit policy sees of Ray Serve replicas (``route_request``'s arguments).

- ``RayReplica``: a ``ReplicaView`` of one candidate replica. Its engine is a
  ``schedkit.edge.remote.Load``: the vLLM-named gauges the replica last reported
  (``record_routing_stats``, as old as ``request_routing_stats_period_s``) and the router's
  own count of requests it sent there and has not seen finish. ``cached_tokens`` is what
  the router's prefix index holds of the request: prompt blocks it sent there before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schedkit.edge.remote import Instance
from schedkit.views import RequestView

from schedkit_ray.prefix import PrefixIndex, block_hashes

__all__ = ["PromptBlocks", "RayReplica"]


class PromptBlocks:
    """One request's prompt tokens, hashed once per block size asked."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = tokens
        self._hashes: dict[int, list[int]] = {}

    def hashes(self, block_size: int) -> list[int]:
        if block_size not in self._hashes:
            self._hashes[block_size] = block_hashes(self.tokens, block_size)
        return self._hashes[block_size]


class RayReplica(Instance):
    """A ``ReplicaView`` of one Ray Serve replica (``schedkit.edge.remote.Instance``, its
    ``url`` Ray's id of it): ``index`` is its place among this decision's candidates
    (sorted by replica id), ``unique_id`` Ray's id of it."""

    def __init__(
        self,
        index: int,
        unique_id: str,
        gauges: Mapping[str, float],
        in_flight: int,
        started: float,
        prefix: PrefixIndex,
        prompt: PromptBlocks,
        role: str = "both",
    ) -> None:
        super().__init__(index, role, unique_id, started)
        self.unique_id = unique_id
        self.load.gauges = dict(gauges)
        self.load.in_flight = in_flight
        self._prefix = prefix
        self._prompt = prompt

    def cached_tokens(self, request: RequestView) -> int:
        size = self.load.block_size
        matched = self._prefix.matched_blocks(self.unique_id, self._prompt.hashes(size))
        return max(0, min(matched * size, request.num_prompt_tokens - 1))

    def __repr__(self) -> str:
        return f"RayReplica({self._index}: {self.unique_id})"


def numeric_gauges(stats: Mapping[str, object] | None) -> dict[str, float]:
    """The numbers of a replica's routing stats (anything else is dropped)."""
    out: dict[str, float] = {}
    for name, value in (stats or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out
