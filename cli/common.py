"""What every ``corpora`` command shares: one-line usage errors (exit 2)."""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from typing import Any, Iterator, NoReturn

import click

from corpora.config.extras import MissingExtra

# C0 and C1 control characters but newline and tab, and the Unicode controls
# that reorder text on screen: what a hostile name, URL or text could use to
# move the cursor, set a terminal's title or hide what is shown.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""``text`` safe to print on a terminal: every control character written
    as its escape, so what came from a build or an input shows, never acts.

    >>> printable("shard\x1b]0;pwned\x07.tar")
    'shard\\x1b]0;pwned\\x07.tar'
    """
    return _CONTROLS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def echo(text: Any = "", **options: Any) -> None:
    """``click.echo`` of :func:`printable` text: what every command prints."""
    click.echo(printable(str(text)), **options)


class UsageFailure(click.ClickException):
    """Printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        echo(f"corpora: {self.format_message()}", err=True)


@contextlib.contextmanager
def usage_errors(*kinds: type[Exception]) -> Iterator[None]:
    """Turn the core's typed errors (``kinds``) into :class:`UsageFailure`."""
    try:
        yield
    except kinds as exc:
        raise UsageFailure(str(exc)) from None


class Terminated(BaseException):
    """SIGTERM (what ``timeout``, Kubernetes and Slurm send first), raised in
    the main thread as Ctrl-C's KeyboardInterrupt is, so that the same
    cleanup runs on its way out: the output's lock or lease released,
    temporary files and Beam's folders removed. Not an ``Exception``: no
    ``except Exception`` swallows it."""


_terminated: list[bool] = []


def on_sigterm(signum: int, frame: Any) -> None:
    """The SIGTERM handler :func:`cli.main.main` installs."""
    _terminated.append(True)
    raise Terminated()


def terminated() -> bool:
    """Has this process been sent SIGTERM? (Beam wraps the exception a
    handler raises inside a pipeline; this says what it was.)"""
    return bool(_terminated)


def checked_settings(corpus: str, flags: dict[str, Any], runner: Any, verbose: bool) -> Any:
    """The settings ``corpora build`` and ``corpora fetch`` run with: the flags
    onto settings (:func:`corpora.config.flags.settings_from_flags`), the inputs
    resolved and checked, the image store checked; every refusal one line,
    exit 2. ``runner``'s filesystems (an S3 endpoint and keys) are set first,
    for the input checks."""
    from corpora.config.flags import FlagError, settings_from_flags
    from corpora.sources.inputs import InputError
    from corpora.store import StoreError
    from pipelines.inputs import resolve_inputs
    from pipelines.runners import RunnerError, use_filesystems
    from pipelines.store import check_store

    with usage_errors(FlagError, InputError, RunnerError, StoreError):
        use_filesystems(runner, verbose)
        settings = resolve_inputs(settings_from_flags(corpus, **flags))
        check_store(settings.store)
    return settings


def pipeline_failed(exc: Exception, command: str, verbose: bool) -> NoReturn:
    """End a command whose pipeline raised ``exc``: a worker that found an
    input unreadable is one line and exit 2; any other failure is one line
    and exit 1, with the traceback as well under ``-v``. A pipeline stopped
    by SIGTERM is not a failure: :class:`Terminated` goes on up."""
    if terminated():
        raise Terminated() from None
    from pipelines.inputs import input_error_of  # Beam only once a pipeline ran

    unreadable = input_error_of(exc)
    if unreadable is not None and not verbose:
        raise UsageFailure(str(unreadable)) from None
    message = str(exc).strip().splitlines()
    last = message[-1] if message else type(exc).__name__
    click.echo(f"corpora: {command} failed: {last}", err=True)
    if verbose:
        raise exc
    sys.exit(1)


class CorpusName(click.Choice):
    """A corpus of the catalog; a name it does not know is refused naming the
    closest one (``CORPUS`` in the usage line, not every name in braces)."""

    name = "corpus"

    def __init__(self, names: list[str]):
        super().__init__(names)

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "CORPUS"

    def convert(self, value, param, ctx):
        if value in self.choices:
            return value
        close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        self.fail(f"unknown corpus {value!r} ({hint}`corpora list` names them)", param, ctx)


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
    except MissingExtra as exc:  # an optional dependency: one line naming the extra
        raise UsageFailure(str(exc)) from None
    except click.NoSuchOption as exc:
        close = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        raise UsageFailure(f"no such option: {exc.option_name}{close}") from None
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "corpora"
        message = " ".join(exc.format_message().split())  # click lists choices on lines
        raise UsageFailure(f"{message} (see {command} --help)") from None
