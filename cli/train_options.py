"""The flags of ``corpora train``, made from the trainer's configuration dataclasses.

A field with an ``option`` in its metadata (``trainer.config.option``) is one
flag: its help text, choices and range come from there, its default from the
field (a field without one, such as ``--steps`` or the recipe's ``--lr``,
defaults to None: required, or the recipe's). The flag's parameter is the
field's name, so :func:`values` hands each dataclass its own:

    >>> from trainer.config import OptimConfig
    >>> values({"lr": 0.1, "steps": 5, "clip_norm": 1.0}, OptimConfig)
    {'lr': 0.1, 'clip_norm': 1.0}
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, Sequence

import click

from trainer.config import option_fields, option_of


def _kind(cls: type, field: dataclasses.Field) -> type:
    """The type of one value of ``field``: ``str | None`` → str."""
    declared = option_of(field).kind or typing.get_type_hints(cls)[field.name]
    if isinstance(declared, types.UnionType) or typing.get_origin(declared) is typing.Union:
        (declared,) = [arg for arg in typing.get_args(declared) if arg is not type(None)]
    return declared


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None  # required, or set from elsewhere (a recipe, a named size, --smoke)


def click_options(
    cls: type, field: dataclasses.Field, default: Any = dataclasses.MISSING
) -> tuple[str, dict]:
    """The flag of ``field`` and its ``click.option`` settings; ``default`` overrides the
    field's."""
    found = option_of(field)
    kind = _kind(cls, field)
    settings: dict[str, Any] = {"help": found.help}
    if found.required:
        settings["required"] = True
    else:
        settings["default"] = _default(field) if default is dataclasses.MISSING else default
    if kind is bool:
        settings["is_flag"] = True
    else:
        settings["show_default"] = True
        if found.choices is not None:
            settings["type"] = click.Choice(list(found.choices))
        elif found.low is not None or found.high is not None:
            settings["type"] = (click.IntRange if kind is int else click.FloatRange)(
                found.low, found.high
            )
        elif kind is not str:
            settings["type"] = kind
    if found.metavar is not None:
        settings["metavar"] = found.metavar
    if found.multiple:
        settings["multiple"] = True
        settings.pop("default", None)
    return found.flag, settings


def options(cls: type, exclude: Sequence[str] = (), defaults: Mapping[str, Any] | None = None):
    """A decorator adding a flag for each option field of ``cls`` (but ``exclude``), in the
    fields' order; ``defaults`` replaces some fields' defaults for this command."""
    defaults = defaults or {}
    unknown = set(defaults) - {f.name for f in option_fields(cls, exclude)}
    if unknown:
        raise ValueError(f"defaults for fields that are not flags: {', '.join(sorted(unknown))}")

    def add(command):
        for field in reversed(option_fields(cls, exclude)):
            flag, settings = click_options(
                cls, field, defaults.get(field.name, dataclasses.MISSING)
            )
            command = click.option(flag, field.name, **settings)(command)
        return command

    return add


def values(flags: Mapping[str, Any], cls: type, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The flags that are option fields of ``cls`` (but ``exclude``), by field name."""
    return {f.name: flags[f.name] for f in option_fields(cls, exclude) if f.name in flags}
