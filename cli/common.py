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


class OneLineGroup(click.Group):
    """A command group whose usage errors, a mistyped flag among them, are one
    line on stderr and exit 2, like every other ``corpora`` refusal."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _one_line():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        with _one_line():
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    try:
        yield
    except click.NoSuchOption as exc:
        close = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        raise UsageFailure(f"no such option: {exc.option_name}{close}") from None
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "corpora"
        message = " ".join(exc.format_message().split())  # click lists choices on lines
        raise UsageFailure(f"{message} (see {command} --help)") from None
