"""Moved to ``schedkit.metadata`` (issue #36): per-request metadata is core, and the kit
(``schedkit.adapter``) re-exports what an adapter needs of it."""

from schedkit._moved import alias_moved

alias_moved(__name__, "schedkit.metadata")
