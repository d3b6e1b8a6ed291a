"""Base class for policies and their options."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class PolicyOptions(BaseModel):
    """Options of a policy. Subclass it; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy:
    """A scheduling policy: some ``@hookimpl`` methods plus an ``Options`` model.

    The entry point in group ``schedkit.policies`` names the class; schedkit instantiates
    it once per engine with validated options. Keep per-engine state on the instance.
    """

    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    fields: ClassVar[tuple[str, ...]] = ()
    """View fields whose meaning differs by engine that the policy relies on (e.g.
    ``"RequestView.block_hashes"``): the adapters warn at launch where an engine supports
    one only in part (``schedkit.capabilities.FIELDS``)."""
    eviction_key_reads: ClassVar[tuple[str, ...] | None] = None
    """The ``BlockView`` fields the policy's ``eviction_key`` reads, when its key depends
    on nothing else (neither the engine view nor policy state): engines may then ask the
    key once for every block alike in those fields, and the simulator does. ``None``
    (the default): the key may read anything, and is asked block by block."""

    def __init__(self, options: PolicyOptions | None = None, **kwargs: Any) -> None:
        if options is None:
            options = self.Options(**kwargs)
        elif kwargs or not isinstance(options, self.Options):
            raise TypeError(
                f"{type(self).__name__} takes an instance of {type(self).__name__}.Options"
                " or keyword options, not both"
            )
        self.options = options
