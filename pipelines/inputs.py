"""A build's inputs, resolved and checked before anything runs.

Inputs go through Beam's FileSystems (local paths, gs://, s3://) or fsspec
(hf://), so resolving them is the pipelines' job. A directory becomes the
corpus's file patterns (``CorpusSpec.input_patterns``); every input must
match files that open; the corpus's own check (a COYO parquet holds the
columns the build reads) runs on every file; a ``--retry-failures`` file must
be a readable ``failures.parquet``. Each refusal is an
:class:`~corpora.sources.inputs.InputError` with one line that names the file.

An input can also turn out unreadable only once a worker reads it (a ``.gz``
truncated half way). :func:`input_error_of` finds that worker's
``InputError`` in the failure the runner reports, whether the runner raised
it again in this process or sent back its traceback as text (a
multi-process DirectRunner, a remote runner), so the user gets the same one
line as for an input refused before the build.
"""

from __future__ import annotations

import os
import re
import stat

from corpora.config import catalog
from corpora.config.settings import BuildSettings
from corpora.sources.inputs import InputError, decompressed
from pipelines import storage


def resolve_inputs(settings: BuildSettings) -> BuildSettings:
    """``settings`` with each input as the patterns the pipeline matches, after
    checking every file they match."""
    spec = catalog.get(settings.corpus)
    resolved: list[str] = []
    for given in settings.inputs:
        patterns = [given]
        if os.path.isdir(given):
            patterns = [os.path.join(given, pattern) for pattern in spec.input_patterns]
        matched: list[str] = []
        for pattern in patterns:
            try:
                matched += storage.match(pattern)
            except Exception as exc:  # Beam raises BeamIOError and friends
                raise InputError(f"cannot read input {given}: {_first_line(exc)}") from None
        if not matched:
            raise InputError(f"input not found: {given}")
        for path in sorted(matched):
            _check_regular(path)  # before opening: a FIFO would block, /dev/zero never ends
            try:
                with storage.open_read(path) as stream:
                    empty = not decompressed(stream, path).read(1)
            except InputError:
                raise
            except Exception as exc:
                raise InputError(f"cannot read input {path}: {_first_line(exc)}") from None
            if empty:
                raise InputError(f"input is empty: {path}")
            if spec.check_input is not None:
                with storage.open_read(path) as stream:
                    spec.check_input(stream, path, settings)
        resolved += patterns
    if settings.fetch.retry_failures:
        _check_failures_file(settings.fetch.retry_failures)
    return settings.replace(inputs=tuple(resolved))


def _check_regular(path: str) -> None:
    """A local input must be a regular file (links to one are fine)."""
    if "://" in path and not path.startswith("file://"):
        return
    local = path[len("file://") :] if path.startswith("file://") else path
    try:
        mode = os.stat(local).st_mode
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {_first_line(exc)}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"input is not a regular file: {path}")


def input_bytes(settings: BuildSettings) -> int | None:
    """The size of every file the build's inputs match, in all; ``None`` where
    a file system does not say (fsspec inputs)."""
    from apache_beam.io.filesystems import FileSystems

    total = 0
    for pattern in settings.inputs:
        if storage.uses_fsspec(pattern):
            return None
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except Exception:  # resolve_inputs matched it already; a flaky store is no reason to fail
            return None
        total += sum(metadata.size_in_bytes for metadata in matched)
    return total


def _check_failures_file(path: str) -> None:
    try:
        storage.read_failure_urls(path)
    except Exception as exc:  # missing file, not parquet, no url column
        raise InputError(f"cannot read failures file {path}: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# How a worker's InputError reads in the text a runner sends back, and the
# step Beam appends to an exception's message.
_REPORTED = re.compile(
    re.escape(f"{InputError.__module__}.{InputError.__qualname__}") + r": (.+)$", re.MULTILINE
)
_STEP = re.compile(r" \[while running '[^\n]*'\]$")


def input_error_of(failure: BaseException) -> InputError | None:
    """The :class:`InputError` a worker raised that made ``failure``, with
    the worker's own one-line message; ``None`` for a failure of another kind.

    >>> text = ("Traceback (most recent call last):\\n  ...\\n"
    ...         "corpora.sources.inputs.InputError: docs.jsonl.gz: Compressed file ended before the"
    ...         " end-of-stream marker was reached [while running 'Read/ParDo(ReadSource)']")
    >>> print(input_error_of(RuntimeError(text.replace("\\n", chr(10)))))
    docs.jsonl.gz: Compressed file ended before the end-of-stream marker was reached
    >>> input_error_of(RuntimeError("disk full")) is None
    True
    """
    seen: set[int] = set()
    current: BaseException | None = failure
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        message = str(current)
        if isinstance(current, InputError):
            return InputError(_STEP.sub("", message.strip().splitlines()[0]))
        reported = _REPORTED.findall(message)
        if reported:
            return InputError(_STEP.sub("", reported[-1].strip()))
        current = current.__cause__ or current.__context__
    return None
