"""schedkit-route: routing across replicas (``route_request``).

Entry point in group ``schedkit.policies``: ``prefix-affinity`` names ``PrefixAffinity``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field
from schedkit import Policy, PolicyOptions, ReplicaView, RequestView, hookimpl

__all__ = ["PrefixAffinity", "scores"]


def scores(
    request: RequestView,
    replicas: Sequence[ReplicaView],
    prefix_weight: float,
    queue_weight: float,
    kv_weight: float,
) -> list[float]:
    """Each replica's weighted score, higher is better, as llm-d's scheduler sums its
    scorers: prefix (the share of the prompt its prefix cache holds), queue (waiting
    requests, min-max normalised: 1 for the shortest queue, 0 for the longest; 1 for
    all when they are equal) and KV (its share of free KV blocks)."""
    usable = max(1, request.num_prompt_tokens - 1)  # the last token is always computed
    queues = [r.engine.num_waiting + r.engine.num_running for r in replicas]
    low, high = min(queues), max(queues)
    out = []
    for replica, queue in zip(replicas, queues, strict=True):
        engine = replica.engine
        prefix = min(1.0, replica.cached_tokens(request) / usable)
        load = 1.0 if high == low else (high - queue) / (high - low)
        free = engine.kv_blocks_free / engine.kv_blocks_total if engine.kv_blocks_total else 0.0
        out.append(prefix_weight * prefix + queue_weight * load + kv_weight * free)
    return out


class PrefixAffinity(Policy):
    """Route each request to the replica whose prefix cache holds most of its prompt,
    balanced by load: llm-d's precise prefix-cache scorer.

    Each replica scores ``prefix_weight`` x the share of the prompt it has cached, plus
    ``queue_weight`` x its queue score (1 for the fewest running plus waiting requests,
    0 for the most), plus ``kv_weight`` x its share of free KV blocks. The highest score
    wins; ties go to the shorter queue, then the lower index. The defaults, 3 for the
    prefix and 2 for the queue, are llm-d's default profile (Red Hat OpenShift AI,
    "Configuring scheduler settings"). A prefix match outweighs a queue difference, but
    a replica with nothing cached and the shortest queue beats one with a third of the
    prompt cached and the longest.

    "Precise" because the score reads each replica's actual cache (``cached_tokens``),
    not a router-side guess from what it routed where.
    """

    class Options(PolicyOptions):
        prefix_weight: float = Field(default=3.0, ge=0, le=1000)
        queue_weight: float = Field(default=2.0, ge=0, le=1000)
        kv_weight: float = Field(default=0.0, ge=0, le=1000)

    options: Options

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        o = self.options
        score = scores(request, replicas, o.prefix_weight, o.queue_weight, o.kv_weight)
        best = max(
            range(len(replicas)),
            key=lambda i: (
                score[i],
                -(replicas[i].engine.num_waiting + replicas[i].engine.num_running),
                -i,
            ),
        )
        return replicas[best].index
