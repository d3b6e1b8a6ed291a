"""Command-line options derived from a pydantic spec: one option per field, its help the
field's description and its default the field's, so a setting is defined once (in the
spec) and the command follows it.

Where the command line spells a field otherwise (vLLM's flag names, a list given as
repeated flags, text to parse), an :class:`Option` says how.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["FIELD_DEFAULT", "Option", "SpecOptions"]

FIELD_DEFAULT: Any = object()  # an Option's default: the field's own


@dataclass(frozen=True)
class Option:
    """How the command line gives one field: its flags (default: typer's from the name),
    the parameter's name, the type typer reads (default: the field's), that parameter's
    default when it is not the field's, and how the value read becomes the field's
    (which may raise ``SchedkitError`` with a message for the user)."""

    flags: tuple[str, ...] = ()
    param: str | None = None
    cli_type: Any = None
    default: Any = FIELD_DEFAULT
    convert: Callable[[Any], Any] | None = None


def _plain(annotation: Any) -> Any:
    """``annotation`` as typer reads it: no constraints, literals as ``str``."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _plain(typing.get_args(annotation)[0])
    if origin is Literal:
        return str
    if origin in (types.UnionType, typing.Union):
        parts = tuple(_plain(a) for a in typing.get_args(annotation))
        return typing.Union[parts]  # noqa: UP007 - built from a tuple
    return annotation


@dataclass(frozen=True)
class _Field:
    path: tuple[str, ...]  # ("settings", "max_num_seqs") or ("jobs",)
    info: FieldInfo
    option: Option

    @property
    def param(self) -> str:
        return self.option.param or self.path[-1]

    def parameter(self) -> inspect.Parameter:
        option = self.option
        # no flags given: typer's own from the name (``--max-num-seqs``, ``--goodput/--no-goodput``)
        flags = option.flags
        cli_type = option.cli_type if option.cli_type is not None else _plain(self.info.annotation)
        if option.default is not FIELD_DEFAULT:
            default = option.default
        elif self.info.is_required():
            default = inspect.Parameter.empty
        else:
            default = self.info.get_default(call_default_factory=True)
        return inspect.Parameter(
            self.param,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[cli_type, typer.Option(*flags, help=self.info.description)],
        )


class SpecOptions:
    """The options of ``spec``'s fields (a group model's fields, one level down), but
    those in ``skip``; ``options`` by dotted path (``settings.tp``)."""

    def __init__(
        self,
        spec: type[BaseModel],
        groups: Mapping[str, type[BaseModel]],
        options: Mapping[str, Option],
        skip: frozenset[str] = frozenset(),
    ) -> None:
        self.fields = [
            _Field(path, info, options.get(".".join(path), Option()))
            for path, info in _fields(spec, groups)
            if ".".join(path) not in skip
        ]

    def parameters(self) -> list[inspect.Parameter]:
        return [field.parameter() for field in self.fields]

    def flag(self, name: str) -> str:
        """The first flag of the field ``name`` (its last path part), for messages."""
        for field in self.fields:
            if field.path[-1] == name and field.option.flags:
                return field.option.flags[0].split("/")[0]
        return "--" + name.replace("_", "-")

    def data(self, given: dict[str, Any]) -> dict[str, Any]:
        """The spec's data from the command's values (taken out of ``given``), nested by
        group and converted."""
        data: dict[str, Any] = {}
        for field in self.fields:
            value = given.pop(field.param)
            if field.option.convert is not None:
                value = field.option.convert(value)
            *groups, name = field.path
            target = data
            for group in groups:
                target = target.setdefault(group, {})
            target[name] = value
        return data


def _fields(
    spec: type[BaseModel], groups: Mapping[str, type[BaseModel]]
) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    for name, info in spec.model_fields.items():
        if name in groups:
            for inner, inner_info in groups[name].model_fields.items():
                yield (name, inner), inner_info
        else:
            yield (name,), info
