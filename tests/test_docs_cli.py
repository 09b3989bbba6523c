"""docs/cli.md documents every option of every command, as the code defines it."""

import os

import click

from cli.main import cli
from tests.helpers import REPO


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,), command


def test_every_option_of_every_command_is_in_docs_cli():
    with open(os.path.join(REPO, "docs", "cli.md"), encoding="utf-8") as handle:
        docs = handle.read()
    missing = []
    for path, command in _commands(cli):
        assert f"## `corpora {' '.join(path)}`" in docs, path
        for param in command.params:
            for flag in getattr(param, "opts", []):
                if flag.startswith("-") and flag not in docs:
                    missing.append(f"corpora {' '.join(path)} {flag}")
    assert missing == []
