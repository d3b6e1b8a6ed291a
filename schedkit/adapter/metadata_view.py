"""The request metadata properties of an adapter's ``RequestView``, written once.

Every engine carries a request's schedkit metadata in a mapping of its own (vLLM's
``sampling_params.extra_args``, SGLang's ``sampling_params.custom_params``, LMDeploy's
``seq.meta``); what a view reports of it is the same everywhere: ``tenant``,
``slo_ttft_ms`` and ``slo_tpot_ms`` read once, when the view is made, and ``priority``
from the engine's own field, all within the server's ``TrustConfig`` bounds. With an edge
key (``schedkit.seal``) only metadata the edge sealed is the operator's; anything else is
a client's claim, read as ``TrustConfig.bound`` reads one.

A view kept after its request finished reads the request's last state (docs/hooks.md):
the adapter kit's runtime calls ``freeze`` once the finish observers have run, and the
engine may then free or reuse what the view read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schedkit.seal import Seal
from schedkit.trust import TrustConfig

__all__ = ["FROZEN_FIELDS", "MetadataView"]

FROZEN_FIELDS = (
    "priority",
    "arrival_time",
    "num_prompt_tokens",
    "num_cached_tokens",
    "num_computed_tokens",
    "num_output_tokens",
    "max_tokens",
    "num_preemptions",
    "block_hashes",
)
"""The RequestView fields an engine may change or clear once a request has finished
(``request_id``, ``tenant`` and the SLO targets never change)."""

_FROZEN_CLASSES: dict[type, type] = {}


class MetadataView:
    """Mixin for an adapter's request view: ``tenant``, ``priority``, ``slo_ttft_ms`` and
    ``slo_tpot_ms`` from the request's metadata mapping.

    The view calls ``_read_metadata`` once in its ``__init__`` and defines
    ``_claimed_priority`` (the priority the request carries, read on every access: an engine
    may change it after arrival). A view whose engine has its own value for "no priority
    given" overrides ``_bound_priority``.
    """

    __slots__ = ("_frozen", "_slo_tpot_ms", "_slo_ttft_ms", "_tenant", "_trust", "_vouched")

    _tenant: str
    _slo_ttft_ms: float | None
    _slo_tpot_ms: float | None
    _trust: TrustConfig
    _vouched: bool
    _frozen: dict[str, Any]

    def _read_metadata(self, fields: object, trust: TrustConfig, seal: Seal | None) -> None:
        """Read ``fields`` (the request's metadata mapping; anything else counts as none)
        within ``trust``'s bounds; with ``seal`` (the server's edge key), unsealed fields
        are a client's claim."""
        self._trust = trust
        # With an edge key, only what the edge sealed is the operator's (schedkit.seal).
        self._vouched = seal is None or seal.verify(fields)
        meta = trust.bound(fields, None, vouched=self._vouched)
        self._tenant = meta.tenant
        self._slo_ttft_ms = meta.slo_ttft_ms
        self._slo_tpot_ms = meta.slo_tpot_ms

    # Read-only for policies, as every view.
    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def slo_ttft_ms(self) -> float | None:
        return self._slo_ttft_ms

    @property
    def slo_tpot_ms(self) -> float | None:
        return self._slo_tpot_ms

    @property
    def priority(self) -> int:
        return self._bound_priority(self._claimed_priority())

    def _claimed_priority(self) -> object:
        """The priority the request carries now: the engine's field, or the metadata's."""
        raise NotImplementedError

    def _bound_priority(self, claimed: object) -> int:
        """``claimed`` within ``trust``'s bounds for this request's tenant (a tenant's tier
        wins; an unvouched claim counts only where ``priority_from_body`` allows)."""
        return self._trust.bound_priority(claimed, self._tenant, vouched=self._vouched)

    def freeze(self) -> None:
        """The request finished: from now on the view reads the values it has now, on
        every engine (its class becomes a frozen subclass, so live views pay nothing)."""
        cls = type(self)
        if cls in _FROZEN_CLASSES.values():
            return
        values = {name: getattr(self, name) for name in FROZEN_FIELDS}
        values["block_hashes"] = tuple(values["block_hashes"])
        self._frozen = values
        self.__class__ = _frozen_class(cls)


def _frozen_class(cls: type) -> type:
    """``cls`` with the fields of ``FROZEN_FIELDS`` read from ``_frozen``."""
    frozen = _FROZEN_CLASSES.get(cls)
    if frozen is None:
        namespace: dict[str, object] = {"__slots__": ()}
        for name in FROZEN_FIELDS:
            namespace[name] = property(_reader(name))
        frozen = _FROZEN_CLASSES[cls] = type(f"Frozen{cls.__name__}", (cls,), namespace)
    return frozen


def _reader(name: str) -> Callable[[MetadataView], object]:
    def read(view: MetadataView) -> object:
        return view._frozen[name]

    return read
