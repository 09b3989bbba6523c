"""The corpus and stage options of ``corpora build`` and ``corpora fetch``: one
flag per option of the catalog's specs and of the stage list's stages.

Nothing here names a corpus or a stage: a corpus added to the catalog, or a
stage added to the list (:mod:`corpora.stages`), brings its flags.
An option named like one of the build's own flags (coyo's ``min_clip_sim``
and ``max_aspect_ratio``) is set by that flag (see :mod:`corpora.config.flags`),
whose help says so with :func:`help_for`.
"""

from __future__ import annotations

from typing import Any

import click

from corpora import stages
from corpora.config import catalog, flags
from corpora.config.spec import Option


def corpus_options(command):
    """Add a flag for every catalog option that is not one of the build's own flags."""
    own = set(flags.FETCH_FLAGS) | set(flags.CLIP_FLAGS) | set(flags.BUILD_FLAGS)
    for option in reversed(list(catalog.options().values())):
        if option.name not in own:
            command = click.option(option.flag, option.name, **_click(option))(command)
    return command


def stage_options(command):
    """Add a flag for every option of the stages of the list."""
    declared = [(stage, option) for stage in stages.all_stages() for option in stage.options]
    for stage, option in reversed(declared):  # click shows the last decorator first
        command = click.option(
            option.flag, option.name, **_click(option, f"{stage.name} stage: {option.help}")
        )(command)
    return command


def help_for(name: str) -> str:
    """What the option ``name`` does and for which corpora: ``"coyo: keep rows …"``."""
    option = catalog.options()[name]
    default = "" if option.default in (None, False) else f" Default: {option.default}."
    return f"{', '.join(catalog.option_users(name))}: {option.help}{default}"


def _click(option: Option, help: str | None = None) -> dict[str, Any]:
    # default None: a flag left out keeps the corpus's default (corpora.config.flags)
    default = "" if option.default in (None, False) else f" Default: {option.default}."
    shown = {"help": help_for(option.name) if help is None else help + default, "default": None}
    if option.type is bool:
        return {**shown, "is_flag": True}
    if option.choices:
        return {**shown, "type": click.Choice(option.choices)}
    if option.repeatable:  # click gives () when the flag is left out: the default then
        return {
            **shown,
            "type": str,
            "multiple": True,
            "metavar": "PATH",
            "callback": _none_if_empty,
        }
    if option.type is tuple:
        return {**shown, "type": str, "metavar": "A,B,…"}
    return {**shown, "type": option.type}


def _none_if_empty(context, parameter, value):
    return value or None
