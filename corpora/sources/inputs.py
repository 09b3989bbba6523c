"""Reading input files: compression by extension, one-member zips, lines.

The core never opens remote paths itself: the engine (Beam's FileSystems, or
fsspec for ``hf://``) hands it a binary stream and the path it came from.

Input files come from the open web. A file that cannot be read (a truncated
``.gz``, corrupt deflate data, a zip with no or two members) is an
:class:`InputError`, one line naming the file; a line that cannot be used is
a ``Drop`` with a reason, and reading goes on. A line longer than
``max_line_bytes`` is never held whole: :func:`iter_lines` skips it and yields
a :class:`LongLine` in its place, which :func:`json_object` drops as
``line_too_long``.
"""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import io
import math
import re
import shutil
import tempfile
import zipfile
import zlib
from typing import Any, BinaryIO, Iterator

from corpora.record import Drop

# The longest line a reader loads (bytes, without its line ending); longer
# lines are dropped as ``line_too_long``. An MMC4 document with its
# similarity matrix and face detections is well under 1 MB.
MAX_LINE_BYTES = 8 << 20
_SKIP_CHUNK = 1 << 20
# What a file that cannot be decompressed raises: gzip's BadGzipFile and a
# truncated stream (OSError, EOFError), corrupt deflate data (zlib.error), a
# zip member's bad CRC (BadZipFile).
READ_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile)
# A ``\uD800``-``\uDFFF`` escape: JSON text can name a lone surrogate, which
# is no character and cannot be written as UTF-8.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class InputError(Exception):
    """An input that cannot be read at all (reported with exit code 2); the
    message is one line that names the file."""


@dataclasses.dataclass(frozen=True)
class LongLine:
    """A line longer than the cap, in place of its bytes (never read whole)."""

    length: int  # bytes, its line ending included
    limit: int


def seekable(stream: BinaryIO) -> BinaryIO:
    try:
        if stream.seekable():
            return stream
    except (AttributeError, ValueError):
        pass
    spooled = tempfile.SpooledTemporaryFile(max_size=64 << 20)
    shutil.copyfileobj(stream, spooled, 1 << 20)
    spooled.seek(0)
    return spooled  # type: ignore[return-value]


def decompressed(stream: BinaryIO, path: str) -> BinaryIO:
    """Wrap ``stream`` so that it yields the uncompressed bytes of ``path``.

    ``.gz`` is gunzipped; ``.zip`` must hold exactly one member (MMC4 ships
    one ``.jsonl`` per zip), which is returned.
    """
    name = path.lower()
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if name.endswith(".zip"):
        try:
            archive = zipfile.ZipFile(seekable(stream))
            members = [m for m in archive.infolist() if not m.is_dir()]
            if len(members) != 1:
                raise InputError(f"{path}: expected one member in the zip, found {len(members)}")
            return archive.open(members[0])  # type: ignore[return-value]
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
            raise InputError(f"{path}: not a zip file we can read ({exc})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: {_one_line(exc)}") from None
    return stream


def iter_lines(
    stream: BinaryIO, path: str, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes | LongLine]]:
    """Yield ``(line_number, raw_line)`` (1-based) of a possibly compressed file.

    Lines are bytes so that a reader can drop one that is not UTF-8 with a
    reason instead of failing the whole file. A UTF-8 byte-order mark before
    the first line is removed. A line longer than ``max_line_bytes`` is read
    past in chunks and yielded as a :class:`LongLine`. A file that cannot be
    decompressed raises :class:`InputError` naming it.

    >>> data = codecs.BOM_UTF8 + b'{"a": 1}\\n\\n' + b"x" * 20 + b"\\n{}"
    >>> list(iter_lines(io.BytesIO(data), "docs.jsonl", max_line_bytes=10))
    [(1, b'{"a": 1}'), (3, LongLine(length=21, limit=10)), (4, b'{}')]
    """
    try:
        reader = io.BufferedReader(decompressed(stream, path), 1 << 20)  # type: ignore[arg-type]
        number = 0
        while True:
            # +2: room for the longest line allowed and its \r\n, so that
            # a line that fits is always read whole in one call
            chunk = reader.readline(max_line_bytes + 2)
            if not chunk:
                return
            number += 1
            if number == 1 and chunk.startswith(codecs.BOM_UTF8):
                chunk = chunk[len(codecs.BOM_UTF8) :]
            if not chunk.endswith(b"\n") and len(chunk) == max_line_bytes + 2:
                length = len(chunk)
                while chunk and not chunk.endswith(b"\n"):
                    chunk = reader.readline(_SKIP_CHUNK)
                    length += len(chunk)
                yield number, LongLine(length, max_line_bytes)
                continue
            line = chunk.rstrip(b"\r\n")
            if len(line) > max_line_bytes:
                yield number, LongLine(len(chunk), max_line_bytes)
            elif line.strip():
                yield number, line
            else:  # a run of blank lines is read past a buffer at a time, not line by line
                number += _skip_blank_lines(reader)
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{path}: {_one_line(exc)}") from None


def _skip_blank_lines(reader: io.BufferedReader) -> int:
    """Read past the line ends at the head of ``reader``; how many lines."""
    lines = 0
    while True:
        ahead = reader.peek(1 << 16)[: 1 << 16]
        blank = len(ahead) - len(ahead.lstrip(b"\r\n"))
        if not blank:
            return lines
        lines += ahead.count(b"\n", 0, blank)
        reader.read(blank)


def json_object(raw: bytes | LongLine, where: str):
    """A JSON-lines record as a dict, or a ``Drop`` saying why it is not one
    (``line_too_long``, ``not_utf8``, ``bad_json``). ``where`` names the line
    (``file:line``). Nothing in the line can make it raise.

    >>> json_object(b'{"text": "a"}', "f.jsonl:1")
    {'text': 'a'}
    >>> [json_object(raw, "f.jsonl:2").reason for raw in
    ...  (b"[1]", b"\\xff", b'{"t": "\\\\ud800"}', b'{"n": ' + b"7" * 5000 + b"}")]
    ['bad_json', 'not_utf8', 'not_utf8', 'bad_json']
    """
    import json

    if isinstance(raw, LongLine):
        return Drop(
            "line_too_long", where, detail=f"{raw.length} bytes, over the {raw.limit}-byte cap"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Drop("not_utf8", where, detail="line is not valid UTF-8")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, deep nesting
        return Drop("bad_json", where, detail=_one_line(exc)[:200])
    if not isinstance(obj, dict):
        return Drop("bad_json", where, detail="line is not a JSON object")
    if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(obj):
        return Drop("not_utf8", where, detail="a \\u escape names a lone surrogate")
    return obj


def _holds_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:  # no recursion: JSON may nest as deep as the parser allows
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return False


def non_finite(value: Any) -> bool:
    """Does a JSON value hold ``NaN`` or an infinity anywhere (which no JSON
    writer takes back)?

    >>> non_finite({"boxes": [[0.1, 2]]}), non_finite([1, {"x": float("nan")}])
    (False, True)
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return False


def type_name(value: Any) -> str:
    """How a value is named in a ``bad_value`` detail.

    >>> type_name(float("inf")), type_name("x"), type_name(None), type_name(True)
    ('Infinity', 'a string', 'null', 'a boolean')
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({bytes: "bytes", list: "a list", dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
