"""The ``EngineView`` the simulated engine gives policies: read-only, reading live state."""

from __future__ import annotations

from collections.abc import Sized
from typing import Protocol

from schedkit.sim.config import SimConfig
from schedkit.sim.kv.blocks import BlockTable
from schedkit.sim.request import SimRequest
from schedkit.views import RequestView


class _Kv(Protocol):
    @property
    def num_free(self) -> int: ...
    def lookup(self, table: BlockTable, num_tokens: int) -> tuple[int, int, int]: ...


class ViewedEngine(Protocol):
    """What the view reads of the simulated engine (``engine.SimEngine``)."""

    @property
    def clock(self) -> float: ...
    @property
    def cfg(self) -> SimConfig: ...
    @property
    def kv(self) -> _Kv: ...
    @property
    def running(self) -> Sized: ...
    @property
    def waiting(self) -> Sized: ...
    @property
    def step_index(self) -> int: ...


class SimEngineView:
    """A ``schedkit.EngineView`` over a ``SimEngine``; one object for the engine's life.

    Every field is read from the engine when asked, so no count is ever stale; none can
    be set (as on vLLM and SGLang, whose views are properties over the engine).
    """

    __slots__ = ("_engine",)
    _engine: ViewedEngine

    def __init__(self, engine: ViewedEngine) -> None:
        object.__setattr__(self, "_engine", engine)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"EngineView is read-only: cannot set {name!r}")

    @property
    def clock(self) -> float:
        return self._engine.clock

    @property
    def kv_blocks_total(self) -> int:
        return self._engine.cfg.num_blocks

    @property
    def kv_blocks_free(self) -> int:
        return self._engine.kv.num_free

    @property
    def block_size(self) -> int:
        return self._engine.cfg.block_size

    @property
    def num_running(self) -> int:
        return len(self._engine.running)

    @property
    def num_waiting(self) -> int:
        return len(self._engine.waiting)

    @property
    def step_index(self) -> int:
        return self._engine.step_index

    def cached_tokens(self, request: RequestView) -> int:
        """The leading blocks of ``request``'s tokens in the prefix cache (shared ones
        and, after a preemption, its own kept ones), as admission would look them up."""
        if not isinstance(request, SimRequest):
            return 0
        shared, own, _ = self._engine.kv.lookup(request.blocks, request.num_tokens)
        return (shared + own) * self._engine.cfg.block_size

    def __repr__(self) -> str:
        return (
            f"SimEngineView(clock={self.clock}, step_index={self.step_index},"
            f" kv_blocks_free={self.kv_blocks_free}/{self.kv_blocks_total},"
            f" num_running={self.num_running}, num_waiting={self.num_waiting})"
        )
