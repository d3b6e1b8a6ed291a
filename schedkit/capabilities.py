"""What each engine honours of every hook: the capability matrix.

One meaning per hook is the contract (``docs/hooks.md``). Where an engine cannot honour
it exactly, the entry here is ``partial`` and says what differs; ``docs/hooks.md`` shows
this table (``tests/test_capabilities.py`` fails when the two disagree), the adapters call
``warn_unsupported`` when they start, and the bench warns before a run. Units are the
same everywhere unless an entry says otherwise: seconds on the engine's clock, tokens,
and KV blocks of the engine's block size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from schedkit.hookspecs import HOOK_NAMES

__all__ = [
    "ENGINES",
    "FIELDS",
    "MATRIX",
    "TIERS",
    "Capability",
    "differences",
    "matrix_engine",
    "render_markdown",
    "warn_unsupported",
]

log = logging.getLogger("schedkit")

Level = Literal["full", "partial", "none"]
ENGINES = ("sim", "vllm", "sglang", "lmdeploy", "ray")


@dataclass(frozen=True, slots=True)
class Capability:
    level: Level
    note: str = ""


FULL = Capability("full")

# Ray Serve (schedkit_ray): its router calls route_request; every other hook runs in the
# replicas' engines, each its own column.
IN_REPLICAS = Capability(
    "none",
    "Ray's router only routes: this hook runs in the replicas' engines (schedkit_ray's"
    " SimReplica runs schedkit serve sim with the same config; see the sim, vllm and"
    " sglang columns)",
)
RAY_ROUTE = Capability(
    "partial",
    "schedkit_ray.SchedkitRouter, once per routing attempt (Ray asks again after a backoff"
    " when the chosen replica is full); the replicas are Ray's candidates (those not at"
    " max_ongoing_requests) sorted by replica id; each engine view is the replica's"
    " vLLM-named gauges as last reported (as old as request_routing_stats_period_s) and"
    " the router's own count of requests in flight there; cached_tokens is the router's"
    " prefix index of the prompts it sent there (text counted as words), not the engine's"
    " cache; a policy that raises, answers None or out of range, or runs past budget_ms"
    " gets Ray's power-of-two choice, counted",
)

MATRIX: dict[str, dict[str, Capability]] = {
    "on_request_arrived": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": FULL,
        "lmdeploy": FULL,
        "ray": IN_REPLICAS,
    },
    "admit_request": {
        "sim": FULL,
        "vllm": Capability(
            "full", "a rejected request ends with finish_reason abort, stop_reason 'rejected: …'"
        ),
        "sglang": Capability("full", "a rejected request is answered HTTP 503 'rejected: …'"),
        "lmdeploy": Capability(
            "full", "a rejected request is stopped unscheduled and ends when its session does"
        ),
        "ray": IN_REPLICAS,
    },
    "order_waiting": {
        "sim": FULL,
        "vllm": Capability(
            "full",
            "requests holding KV blocks of a KV connector keep vLLM's order, first;"
            " requests whose KV a connector loads (0.34's async_kv_waiting) are ordered"
            " with the rest, one order, and start their loads in it, also while the batch"
            " is full; 0.34's --cache-aware-admission-window is turned off (a warning says"
            " so): it would reorder the policy's order",
        ),
        "sglang": Capability(
            "full",
            "called before each prefill batch is formed. Prefill and decode are separate"
            " batches and a prefill batch takes the whole chunk (the simulator's mixed step"
            " shares it with decodes); in the overlap loop (the GPU default) a finished"
            " request's slot is reused a batch later: waits and step reports come at"
            " another pace, so an order by waits or by tokens served (vtc) may differ."
            " On a disaggregated decode server it orders the pre-allocation queue (who"
            " gets KV space and a transfer first), as the simulator's decode instances",
        ),
        "lmdeploy": Capability(
            "partial",
            "called before each prefill turn, on the queue by arrival; LMDeploy's turns"
            " stand and the order applies within them: while a prompt longer than"
            " max_prefill_token_num waits, LMDeploy's loop runs turns that admit only"
            " shorter prompts (LMDEPLOY_PT_TTFT_SHORT_TURNS, 3, between long ones) and"
            " turns that start one long prompt's first chunk alone, the first long prompt"
            " in the order, while shorter prompts the order puts first wait for the next"
            " turn; the order replaces LMDeploy's own among long prompts (fewest chunks"
            " first, aged) as it replaces shortest first among the others. Prefill and"
            " decode are separate forwards, so waits, step reports and the prefix cache's"
            " content come at another pace than on the simulator: an order by waits, by"
            " tokens served or by cached prefixes (cache-aware) may differ",
        ),
        "ray": IN_REPLICAS,
    },
    "plan_batch": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability(
            "partial",
            "token_budget and prefill_chunk cap prefill batches only; SGLang runs every"
            " running request in each decode batch, so decode steps are not capped;"
            " max_running caps admissions; prefill_chunk caps a request alone too (vLLM"
            " and the simulator let it use the whole token budget)",
        ),
        "lmdeploy": Capability(
            "partial",
            "asked at each prefill attempt (up to three a forward: LMDeploy may try a"
            " short-only turn, then a long one): token_budget caps a prefill batch's later"
            " prompts (the first always enters; LMDeploy's max_prefill_token_num still sets"
            " chunk sizes), max_running caps ready plus running sequences (max_batches);"
            " prefill_chunk is not honoured; decode steps are not capped",
        ),
        "ray": IN_REPLICAS,
    },
    "select_victims": {
        "sim": FULL,
        "vllm": Capability(
            "full",
            "a victim vLLM already scheduled this step is unscheduled, as the simulator;"
            " with a KV connector too, except while it has pending block frees: vLLM then"
            " waits for them instead of preempting, and the policy is not asked",
        ),
        "sglang": Capability(
            "partial",
            "decode retraction frees memory for the whole decode batch: `needing` is the"
            " request SGLang would keep longest; with --enable-priority-scheduling SGLang's"
            " preemption threshold still decides who may be preempted",
        ),
        "lmdeploy": Capability(
            "partial",
            "a decode step's sequence that cannot grow preempts the victims (LMDeploy alone"
            " preempts that sequence itself), and itself too if they do not free enough;"
            " recompute only. `needing` is that sequence, which LMDeploy's allocation 16"
            " tokens ahead picks, and running requests' num_computed_tokens follow its"
            " prefill turns (new prompts wait for a run of decode steps), so both can differ"
            " from the simulator's (contract scenario victims: needing v1, computed"
            " 95/95/79/79; simulator v0, 96/95/94/93) and a policy reading them may choose"
            " other victims",
        ),
        "ray": IN_REPLICAS,
    },
    "select_evictions": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability(
            "partial",
            "candidates are radix-tree leaves (a run of tokens, not one block), all of"
            " them (no window); num_blocks counts leaves; last_access is SGLang's logical"
            " access counter (order only, not seconds); depth counts tree nodes; needs"
            " --radix-cache-backend schedkit",
        ),
        "lmdeploy": Capability(
            "partial",
            "candidates are the prefix trie's evictable leaves, one block each, all of them"
            " (no window); a block deeper in a cached prefix becomes one when its children"
            " go, and follows a chosen child; num_hits and last_access are counted by the"
            " adapter (LMDeploy keeps no hit count and stamps whole seconds)",
        ),
        "ray": IN_REPLICAS,
    },
    "waiting_key": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": FULL,
        "lmdeploy": Capability(
            "partial",
            "as order_waiting: a turn for long work admits the first long prompt in key"
            " order, shorter prompts wait for their turn; among long prompts the key order"
            " replaces LMDeploy's (fewest chunks first, aged)",
        ),
        "ray": IN_REPLICAS,
    },
    "victim_key": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability("partial", "as select_victims: the decode batch's retraction"),
        "lmdeploy": Capability(
            "partial", "as select_victims: needing and computed tokens are LMDeploy's"
        ),
        "ray": IN_REPLICAS,
    },
    "eviction_key": {
        "sim": Capability("full", "every evictable block in key order (no eviction window)"),
        "vllm": Capability(
            "partial",
            "ranks the eviction window's candidates (the oldest evictable blocks, as"
            " select_evictions gets them); the simulator ranks every evictable block",
        ),
        "sglang": Capability(
            "partial",
            "as select_evictions: radix-tree leaves; needs --radix-cache-backend schedkit",
        ),
        "lmdeploy": Capability("partial", "as select_evictions: the prefix trie's leaves"),
        "ray": IN_REPLICAS,
    },
    "route_request": {
        "sim": Capability(
            "full",
            "with --replicas N: a simulated cluster of N engines; disaggregated"
            " (prefill_replicas, decode_replicas): once per pool",
        ),
        "vllm": Capability(
            "none",
            "one engine has no replicas to route to; a router runs in front of them"
            " (schedkit.edge.pd before prefill/decode pairs: once per pool, the decode"
            " instance when the prefill ends, as in the simulator)",
        ),
        "sglang": Capability(
            "none",
            "one engine has no replicas to route to; a router runs in front of them"
            " (schedkit.edge.pd --protocol sglang before prefill/decode pairs: once per"
            " pool, both at arrival: SGLang's protocol names the decode instance before"
            " the prefill ends)",
        ),
        "lmdeploy": Capability(
            "none", "one engine has no replicas to route to; a router runs in front of them"
        ),
        "ray": RAY_ROUTE,
    },
    "on_step_finished": {
        "sim": Capability("full", "a run of identical decode steps may come as one report"),
        "vllm": Capability(
            "full",
            "with async scheduling (the GPU default) step N is reported after step N+1 was"
            " scheduled, so a policy learning from reports (vtc) orders step N+1 without it",
        ),
        "sglang": Capability("full", "prefill and decode batches are separate steps"),
        "lmdeploy": Capability(
            "full",
            "prefill, decode and each chunk of a long prompt are separate steps; a step is"
            " reported when the next is dispatched (LMDeploy prefetches) or a session ends",
        ),
        "ray": IN_REPLICAS,
    },
    "on_request_finished": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": FULL,
        "lmdeploy": FULL,
        "ray": IN_REPLICAS,
    },
}
assert set(MATRIX) == set(HOOK_NAMES), "every hook has a row"

FIELDS: dict[str, dict[str, Capability]] = {
    "RequestView.block_hashes": {
        "sim": Capability("full", "trace hash ids, one per prefix block"),
        "vllm": Capability("full", "vLLM's block digests (prompt and output blocks)"),
        "sglang": Capability(
            "partial",
            "ids of the radix nodes on the request's last prefix match (a node is a run of"
            " tokens, not one block); empty before the first match and on the default Rust"
            " tree core (--radix-cache-backend schedkit selects the Python one)",
        ),
        "lmdeploy": Capability(
            "partial",
            "ids of the trie blocks that hold a prefix of the prompt now (walked on each"
            " read); prompt blocks only",
        ),
        "ray": Capability(
            "none", "empty: the router has no engine's hashes (its prefix index is its own)"
        ),
    },
    "RequestView.num_cached_tokens": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability("full", "SGLang's cached_tokens at admission"),
        "lmdeploy": Capability(
            "full", "LMDeploy's cached_tokens at admission (0 when recomputing a preempted one)"
        ),
        "ray": Capability("full", "0: a request being routed has not been admitted anywhere"),
    },
    "EngineView.kv_blocks_free": {
        "sim": FULL,
        "vllm": FULL,
        "sglang": Capability(
            "full", "pages of --page-size tokens (1 by default): free plus evictable"
        ),
        "lmdeploy": Capability("full", "free GPU blocks plus the trie's unreferenced ones"),
        "ray": Capability(
            "partial",
            "from the replica's vllm:num_gpu_blocks and vllm:kv_cache_usage_perc gauges, as"
            " old as the routing-stats period",
        ),
    },
    "EngineView.cached_tokens": {
        "sim": Capability("full", "the prefix-cache lookup admission makes, in whole blocks"),
        "vllm": Capability(
            "partial",
            "the lookup of KVCacheManager.get_computed_blocks (the coordinator's longest"
            " hit), without its stats and KV events",
        ),
        "sglang": Capability(
            "partial",
            "SGLang's tree_cache.match_prefix on the request's key: pages of --page-size"
            " tokens (1 by default, so a match may end mid-block), and the lookup marks"
            " the matched prefix used, as SGLang's lpm and hrrn do when they sort",
        ),
        "lmdeploy": Capability(
            "partial",
            "the prefix trie's blocks matching the prompt (not a preempted request's output)",
        ),
        "ray": Capability(
            "none",
            "0: the router's view of a replica holds no engine's cache (its prefix"
            " index is ReplicaView.cached_tokens)",
        ),
    },
}
"""View fields whose meaning differs by engine; a policy lists those it relies on in
``Policy.fields`` so the launch warning covers them."""


TIERS: dict[str, dict[str, Capability]] = {
    "select_evictions, eviction_key: the host KV tier": {
        "sim": Capability(
            "full",
            "with kv_offloading_size (vLLM's --kv-offloading-size): candidates are the"
            " stored blocks of the least recently used runs (a hash group's, or a"
            " request's own), last blocks first, within the eviction window; evicting a"
            " block drops the blocks after it in its run, which no lookup could reach",
        ),
        "vllm": Capability(
            "full",
            "0.32-0.34's KV offload tier (OffloadingConnector; --kv-offloading-size) with"
            " eviction_policy SchedkitCachePolicy and cache_policy_module_path"
            " schedkit_vllm.offload: candidates are the evictable host-memory chunks in"
            " vLLM's LRU order, within the eviction window; num_hits counts reuses from"
            " host memory; None is vLLM's LRU",
        ),
        "sglang": Capability("none", "HiCache's host tier evicts by its own rules"),
        "lmdeploy": Capability("none", "LMDeploy has no host KV tier"),
        "ray": Capability("none", "a replica's host tier is its engine's (see its column)"),
    },
}
"""Decisions on KV tiers beyond the GPU's, by the hooks that make them on the GPU."""


def matrix_engine(engine: str) -> str:
    """The matrix column of a bench engine name (``vllm-twin`` runs vLLM's scheduler)."""
    return "vllm" if engine.startswith("vllm") else engine


def differences(hooks: Iterable[str], engine: str) -> list[tuple[str, Capability]]:
    """The hooks among ``hooks`` that ``engine`` does not honour fully."""
    if engine not in ENGINES:
        return []
    return [(h, MATRIX[h][engine]) for h in sorted(hooks) if MATRIX[h][engine].level != "full"]


def warn_unsupported(facade: object, engine: str) -> list[str]:
    """Log one warning per hook the selected policies implement, and per view field they
    declare in ``Policy.fields``, that ``engine`` honours only in part; returns the
    messages. ``facade``: a ``PolicyFacade``."""
    label = getattr(facade, "label", "?")
    implemented: frozenset[str] = getattr(facade, "implemented", frozenset())
    messages = [
        f"schedkit: policy {label!r} uses {hook}, which {engine}"
        f" {'does not support' if cap.level == 'none' else 'supports only in part'}:"
        f" {cap.note} (docs/hooks.md, capability matrix)"
        for hook, cap in differences(implemented, engine)
    ]
    for name, policy in getattr(facade, "policies", ()):
        for field in getattr(policy, "fields", ()):
            cap = FIELDS.get(field, {}).get(engine)
            if cap is not None and cap.level != "full":
                messages.append(
                    f"schedkit: policy {name!r} relies on {field}, which {engine} supports"
                    f" only in part: {cap.note} (docs/hooks.md, capability matrix)"
                )
    for message in messages:
        log.warning("%s", message)
    return messages


def render_markdown() -> str:
    """The matrix as the Markdown table ``docs/hooks.md`` shows."""
    lines = [
        "| hook or field | " + " | ".join(ENGINES) + " |",
        "|---|" + "---|" * len(ENGINES),
    ]
    rows = [(hook, MATRIX[hook]) for hook in HOOK_NAMES] + list(FIELDS.items())
    rows += list(TIERS.items())
    for name, caps in rows:
        cells = [caps[e].level + (f": {caps[e].note}" if caps[e].note else "") for e in ENGINES]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)
