"""schedkit's ``route_request`` as a Ray Serve request router.

``SchedkitRouter`` is Ray's ``PowerOfTwoChoicesRequestRouter`` with the choice asked of
the configured schedkit policy first. Ray builds it in the caller's process (for HTTP,
the ingress replica) and calls ``initialize_state(**request_router_kwargs)``:

- ``policy``: a policy name, composition, config file or config dict (None: Ray's
  default for every request); ``options``: JSON or a dict over the policy's options;
- ``budget_ms``: the policy's hard time bound per decision (default 50);
- ``prefix_blocks``: the prefix index's bound per replica when the replica reports no
  ``vllm:num_gpu_blocks`` (default 65536).

Each ``choose_replicas`` call builds a ``RequestView`` of the request's ``body`` and
``tenant`` keyword arguments (``schedkit.edge.remote.request_view``) and one
``schedkit_ray.views.RayReplica`` per candidate, sorted by replica id. The policy's
answer is the only replica offered to Ray (which probes it and, if it is full, asks
again after a backoff); a policy that raises, answers out of range or None, or runs past
``budget_ms`` gets Ray's power-of-two choice, counted in ``fallbacks`` by reason.
``reports()`` gives every router of this process's counters (the ingress serves them).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, ReplicaID, RunningReplica
from schedkit.edge.remote import request_view

from schedkit_ray import registry
from schedkit_ray.policy import RouteFacade, router_config
from schedkit_ray.prefix import PrefixIndex, prompt_token_ids
from schedkit_ray.views import PromptBlocks, RayReplica, numeric_gauges

__all__ = ["RouterReport", "SchedkitRouter", "reports"]

log = logging.getLogger("schedkit_ray")

DEFAULT_BUDGET_MS = 50.0
DEFAULT_PREFIX_BLOCKS = 65536
ROLES = ("both", "prefill", "decode")  # ReplicaView.role
_PENDING_LIMIT = 65536  # decisions kept for requests Ray has not sent yet


@dataclass
class RouterReport:
    """One router's counters: the replicas it routes to now (in index order), requests
    sent per replica and by whose choice (``policy``, ``fallback`` or ``ray-default``),
    fallbacks by reason, requests in flight per replica, prefix-index blocks per replica,
    replicas seen to die."""

    deployment: str
    policy: str | None
    replicas: list[str] = field(default_factory=list)
    routed: dict[str, dict[str, int]] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    prefix_blocks: dict[str, int] = field(default_factory=dict)
    died: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "policy": self.policy,
            "replicas": self.replicas,
            "routed": self.routed,
            "fallbacks": self.fallbacks,
            "in_flight": self.in_flight,
            "prefix_blocks": self.prefix_blocks,
            "died": self.died,
        }


def reports() -> list[RouterReport]:
    """The counters of every ``SchedkitRouter`` in this process."""
    return [router.report() for router in registry.routers()]


def _uid(replica_id: ReplicaID) -> str:
    return str(replica_id.unique_id)


class SchedkitRouter(PowerOfTwoChoicesRequestRouter):  # type: ignore[misc]
    """Ray's power-of-two router, with the replica chosen by a schedkit policy."""

    def initialize_state(
        self,
        policy: str | Mapping[str, Any] | None = None,
        options: str | Mapping[str, Any] | None = None,
        budget_ms: float = DEFAULT_BUDGET_MS,
        prefix_blocks: int = DEFAULT_PREFIX_BLOCKS,
        role: str = "both",
    ) -> None:
        """``role``: what the deployment's replicas are to the policy (``ReplicaView.role``):
        ``both``, or ``prefill``/``decode`` for one pool of a disaggregated deployment (Ray
        Serve LLM's ``PDPrefillServer``/``PDDecodeServer``, each with its own router)."""
        if role not in ROLES:
            raise ValueError(f"role {role!r}: give one of {', '.join(ROLES)}")
        self._role = role
        config = router_config(policy, options)
        self._facade = None if config is None else RouteFacade.for_router(config, budget_ms)
        self._started = time.monotonic()
        self._prefix = PrefixIndex(prefix_blocks)
        self._in_flight: Counter[str] = Counter()
        self._sent: dict[str, str] = {}  # internal request id -> replica
        self._decisions: OrderedDict[str, tuple[str, str | None, PromptBlocks]] = OrderedDict()
        self._routed: Counter[tuple[str, str]] = Counter()
        self._fallbacks: Counter[str] = Counter()
        self._died: list[str] = []
        registry.add(self)  # a module: shared with the ingress however Ray ships this class
        log.info("schedkit_ray: routing with %s", self.policy_label or "Ray's default")

    @property
    def policy_label(self) -> str | None:
        return None if self._facade is None else self._facade.label

    # -- choosing ------------------------------------------------------------------

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        facade = self._facade
        if facade is None or not facade.has_route or pending_request is None:
            self._remember(pending_request, "ray-default", None, None)
            return await self._ray_default(candidate_replicas, pending_request)
        if not candidate_replicas:
            return []
        body = request_body(pending_request)
        tenant = (pending_request.kwargs or {}).get("tenant")
        metadata = pending_request.metadata
        clock = time.monotonic() - self._started
        request = request_view(
            body, tenant if isinstance(tenant, str) else None, metadata.request_id, clock
        )
        prompt = PromptBlocks(prompt_token_ids(body))
        ordered = sorted(candidate_replicas, key=lambda r: _uid(r.replica_id))
        views = [self._view(i, r, prompt) for i, r in enumerate(ordered)]
        chosen, reason = facade.decide(request, views)
        if chosen is None:
            self._remember(pending_request, "fallback", reason, prompt)
            return await self._ray_default(candidate_replicas, pending_request)
        self._remember(pending_request, "policy", None, prompt)
        return [[ordered[chosen]]]

    async def _ray_default(
        self, candidates: list[RunningReplica], pending_request: PendingRequest | None
    ) -> list[list[RunningReplica]]:
        chosen: list[list[RunningReplica]] = await super().choose_replicas(
            candidates, pending_request
        )
        return chosen

    def _view(self, index: int, replica: RunningReplica, prompt: PromptBlocks) -> RayReplica:
        uid = _uid(replica.replica_id)
        return RayReplica(
            index,
            uid,
            numeric_gauges(replica.routing_stats),
            self._in_flight[uid],
            self._started,
            self._prefix,
            prompt,
            self._role,
        )

    def _remember(
        self,
        pending_request: PendingRequest | None,
        chosen_by: str,
        reason: str | None,
        prompt: PromptBlocks | None,
    ) -> None:
        """Keep the last decision for this request until Ray says where it went (Ray
        may ask again after a backoff: the last answer is the one that counts)."""
        if pending_request is None:
            return
        if prompt is None:
            prompt = PromptBlocks(prompt_token_ids(request_body(pending_request)))
        key = pending_request.metadata.internal_request_id
        self._decisions[key] = (chosen_by, reason, prompt)
        self._decisions.move_to_end(key)
        while len(self._decisions) > _PENDING_LIMIT:
            self._decisions.popitem(last=False)

    # -- what Ray tells the router -------------------------------------------------

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        super().on_request_routed(pending_request, replica_id, result)
        uid = _uid(replica_id)
        key = pending_request.metadata.internal_request_id
        chosen_by, reason, prompt = self._decisions.pop(key, ("ray-default", None, None))
        self._routed[uid, chosen_by] += 1
        if reason is not None:
            self._fallbacks[reason] += 1
        self._in_flight[uid] += 1
        self._sent[key] = uid
        if prompt is not None:
            replica = self._replicas.get(replica_id)
            gauges = numeric_gauges(replica.routing_stats if replica is not None else None)
            size = int(gauges.get("vllm:block_size") or 16)
            bound = int(gauges.get("vllm:num_gpu_blocks", 0))
            self._prefix.add(uid, prompt.hashes(size), bound or None)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        super().on_request_completed(replica_id, internal_request_id)
        self._decisions.pop(internal_request_id, None)
        uid = self._sent.pop(internal_request_id, None)
        if uid is not None and self._in_flight[uid] > 0:
            self._in_flight[uid] -= 1

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """Forget the replica's prefix blocks and in-flight count (Ray fires this more
        than once for one death)."""
        super().on_replica_actor_died(replica_id)
        uid = _uid(replica_id)
        self._prefix.drop(uid)
        self._in_flight.pop(uid, None)
        if uid not in self._died:
            self._died.append(uid)
            log.warning("schedkit_ray: replica %s died; no longer routed to", uid)

    # -- counters ------------------------------------------------------------------

    def report(self) -> RouterReport:
        routed: dict[str, dict[str, int]] = {}
        for (uid, by), n in sorted(self._routed.items()):
            routed.setdefault(uid, {})[by] = n
        return RouterReport(
            deployment=str(self._deployment_id.name),
            policy=self.policy_label,
            replicas=sorted(_uid(r) for r in self.curr_replicas),
            routed=routed,
            fallbacks=dict(sorted(self._fallbacks.items())),
            in_flight={uid: n for uid, n in sorted(self._in_flight.items()) if n},
            prefix_blocks={uid: self._prefix.size(uid) for uid in self._prefix.replicas()},
            died=list(self._died),
        )


def request_body(pending_request: PendingRequest) -> Mapping[str, Any]:
    """The OpenAI body of a request: the ``body`` keyword (``schedkit_ray``'s ingress), or
    the first positional argument as Ray Serve LLM passes it (a dict, or vLLM's pydantic
    ``CompletionRequest``/``ChatCompletionRequest``, read with ``model_dump``); ``{}``
    otherwise (the policy then sees a request of unknown length)."""
    body = (pending_request.kwargs or {}).get("body")
    if body is None and pending_request.args:
        body = pending_request.args[0]
        dump = getattr(body, "model_dump", None)
        if callable(dump):
            try:
                body = dump(exclude_unset=True)
            except Exception:  # a model of another kind: nothing to read
                body = None
    return body if isinstance(body, Mapping) else {}
