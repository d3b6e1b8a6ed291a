"""``select_evictions`` inside SGLang: the ``schedkit`` radix-cache backend.

SGLang evicts whole radix-tree leaves (runs of tokens), smallest eviction priority
first, from a heap its Python tree core builds when an eviction starts
(``FullComponent._evict_device_start``). The ``schedkit`` backend (registered with
``register_radix_cache_backend``, selected with ``--radix-cache-backend schedkit``,
which ``schedkit serve sglang`` adds for eviction policies) builds SGLang's default cache
on the **Python tree core** (the default Rust core only takes a policy name), then, at
each eviction, gives the policy the evictable leaves (``SglangNodeView``) and puts its
choices at the front of that heap, in its order. A parent that becomes a leaf when a chosen
node goes follows right after that node (the policy picks branches, not only their tips).
Leaves it did not name follow in SGLang's own order (``--radix-eviction-policy``, LRU by
default).
"""

from __future__ import annotations

import heapq
from typing import Any

from schedkit.errors import PolicyConfigError

from schedkit_sglang import runtime as _runtime

BACKEND = "schedkit"

__all__ = ["BACKEND", "build_cache", "register"]


def register() -> None:
    """Register the ``schedkit`` radix-cache backend (once per process)."""
    from sglang.srt.mem_cache.registry import (
        register_radix_cache_backend,
        registered_radix_cache_backends,
    )

    if BACKEND not in registered_radix_cache_backends():
        register_radix_cache_backend(BACKEND, build_cache)


def build_cache(ctx: Any) -> Any:
    """SGLang's default radix cache on the Python tree core, with the eviction hook."""
    from sglang.srt.mem_cache.registry import default_radix_cache_factory
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeCore

    ctx.params.tree_core_backend = "python"
    cache = default_radix_cache_factory(ctx)
    core = getattr(cache, "tree_core", None)
    if not isinstance(core, UnifiedTreeCore) or ComponentType.FULL not in core.components_by_type:
        raise PolicyConfigError(
            f"--radix-cache-backend {BACKEND} needs SGLang's unified radix cache on the Python"
            f" tree core, but this configuration built {type(cache).__name__}; drop the"
            " option that selects another cache (e.g. --disable-radix-cache, HiCache, LMCache)"
            " or the schedkit eviction policy"
        )
    _install(core.components_by_type[ComponentType.FULL])
    return cache


def _install(component: Any) -> None:
    """Wrap one ``FullComponent``'s eviction walk (instance attributes, no class patch)."""
    start = component._evict_device_start
    next_node = component._evict_device_next_node
    end = component._evict_device_end
    state: dict[str, Any] = {"ranks": None, "base": None}

    def evict_device_start(request_cnt: int) -> None:
        start(request_cnt)
        runtime = _runtime.ACTIVE
        heap = component._evict_device_heap
        if runtime is None or not heap or not runtime.facade.has_evictions:
            return
        ranks = runtime.eviction_ranks([node for _, node in heap], int(request_cnt))
        if ranks is None:
            return
        base = component.session_ref_eviction_strategy
        order = {key: (rank, 0) for key, rank in ranks.items()}

        def priority(node: Any) -> tuple[int, Any]:
            rank = order.get(id(node))
            return (0, rank) if rank is not None else (1, base(node))

        state["ranks"], state["base"] = order, base
        component.session_ref_eviction_strategy = priority
        component._evict_device_heap = [(priority(node), node) for _, node in heap]
        heapq.heapify(component._evict_device_heap)

    def evict_device_next_node(*args: Any, **kwargs: Any) -> Any:
        chosen = next_node(*args, **kwargs)
        order = state["ranks"]
        last = component._evict_device_last_node
        runtime = _runtime.ACTIVE
        if order and last is not None and id(last) in order and runtime is not None:
            runtime.evicted(1)
            # The parent becomes a leaf once this node goes: it follows right after it,
            # so the policy's choice is a whole branch, not just its tip.
            rank, generation = order[id(last)]
            if last.parent is not None:
                order.setdefault(id(last.parent), (rank, generation + 1))
        return chosen

    def evict_device_end() -> None:
        if state["base"] is not None:
            component.session_ref_eviction_strategy = state["base"]
        state["ranks"] = state["base"] = None
        end()

    component._evict_device_start = evict_device_start
    component._evict_device_next_node = evict_device_next_node
    component._evict_device_end = evict_device_end
