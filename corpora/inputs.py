"""Reading input files: compression by extension, one-member zips, lines.

The core never opens remote paths itself: the engine (Beam's FileSystems, or
fsspec for ``hf://``) hands it a binary stream and the path it came from.
"""

from __future__ import annotations

import gzip
import io
import shutil
import tempfile
import zipfile
from typing import BinaryIO, Iterator


class InputError(Exception):
    """An input that cannot be read at all (reported with exit code 2)."""


def _seekable(stream: BinaryIO) -> BinaryIO:
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
            archive = zipfile.ZipFile(_seekable(stream))
        except zipfile.BadZipFile as exc:
            raise InputError(f"{path}: not a zip file ({exc})") from exc
        members = [m for m in archive.infolist() if not m.is_dir()]
        if len(members) != 1:
            raise InputError(f"{path}: expected one member in the zip, found {len(members)}")
        return archive.open(members[0])  # type: ignore[return-value]
    return stream


def iter_lines(stream: BinaryIO, path: str) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_line)`` (1-based) of a possibly compressed file.

    Lines are bytes so that a reader can drop one that is not UTF-8 with a
    reason instead of failing the whole file.
    """
    reader = io.BufferedReader(decompressed(stream, path), 1 << 20)  # type: ignore[arg-type]
    try:
        for number, line in enumerate(reader, start=1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield number, line
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: {exc}") from exc


def json_object(raw: bytes, where: str):
    """A JSON-lines record as a dict, or a ``Drop`` saying why it is not one
    (``not_utf8``, ``bad_json``). ``where`` names the line (``file:line``)."""
    import json

    from corpora.record import Drop

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Drop("not_utf8", where, detail="line is not valid UTF-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return Drop("bad_json", where, detail=str(exc))
    if not isinstance(obj, dict):
        return Drop("bad_json", where, detail="line is not a JSON object")
    return obj


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
