"""docs/cli.md is the `--help` of every command, as the code prints it.

``python -m tests.test_docs_cli`` rewrites the help blocks of docs/cli.md from
the code (each block follows its ``## `corpora …` `` heading); the test fails
until the page and the code agree.
"""

from __future__ import annotations

import os
import re

import click
from click.testing import CliRunner

from cli.main import cli
from tests.helpers import REPO

DOC = os.path.join(REPO, "docs", "cli.md")
WIDTH = 80
# a section heading and the first ``` block after it
SECTION = re.compile(
    r"(## `corpora(?P<path>[^`]*)`\n(?:(?!## )[^\n]*\n)*?```\n)(?P<help>(?s:.*?))(```)"
)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,), command


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="corpora", terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    return result.output


def documented() -> dict[tuple[str, ...], str]:
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    return {tuple(m["path"].split()): m["help"] for m in SECTION.finditer(text)}


def test_every_command_s_help_is_in_docs_cli_as_printed():
    blocks = documented()
    for path in [()] + [path for path, _ in _commands(cli)]:
        assert path in blocks, f"docs/cli.md has no section for corpora {' '.join(path)}"
        assert blocks[path] == help_text(path), f"run python -m tests.test_docs_cli ({path})"


def write() -> None:
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    text = SECTION.sub(
        lambda m: m.group(1) + help_text(tuple(m["path"].split())) + m.group(4), text
    )
    with open(DOC, "w", encoding="utf-8") as handle:
        handle.write(text)


if __name__ == "__main__":
    write()
