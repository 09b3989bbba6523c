"""What every ``corpora`` command shares: one-line usage errors (exit 2)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import click


class UsageFailure(click.ClickException):
    """Printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"corpora: {self.format_message()}", err=True)


@contextlib.contextmanager
def usage_errors(*kinds: type[Exception]) -> Iterator[None]:
    """Turn the core's typed errors (``kinds``) into :class:`UsageFailure`."""
    try:
        yield
    except kinds as exc:
        raise UsageFailure(str(exc)) from None
