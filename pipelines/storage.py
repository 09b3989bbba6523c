"""Where inputs and outputs live: local disk, ``gs://`` and ``s3://`` through
Beam's FileSystems; ``hf://`` (and any other fsspec protocol Beam does not
know) through fsspec, for inputs only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import shutil
import tempfile
import uuid
from typing import Any, BinaryIO, Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora.fetch.accounting import failure_urls

FSSPEC_SCHEMES = ("hf",)


def scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else ""


def uses_fsspec(path: str) -> bool:
    """Whether ``path`` is read through fsspec rather than Beam's FileSystems."""
    name = scheme(path)
    if not name or name in ("gs", "s3", "file"):
        return False
    if name in FSSPEC_SCHEMES:
        return True
    try:
        FileSystems.get_filesystem(path)
        return False
    except ValueError:
        return True


def match(pattern: str) -> list[str]:
    """The files a path or glob names, sorted."""
    if uses_fsspec(pattern):
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(pattern)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        return sorted(f"{protocol}://{p}" for p in paths if not fs.isdir(p))
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def open_read(path: str) -> BinaryIO:
    if uses_fsspec(path):
        import fsspec

        return fsspec.open(path, "rb").open()
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


@dataclasses.dataclass(frozen=True)
class _Metadata:
    path: str


@dataclasses.dataclass(frozen=True)
class FsspecFile:
    """An fsspec file shaped like Beam's ``ReadableFile`` (``metadata.path``, ``open()``)."""

    path: str

    @property
    def metadata(self) -> _Metadata:
        return _Metadata(self.path)

    def open(self) -> BinaryIO:
        return open_read(self.path)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def read_json(path: str) -> Any:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return json.loads(stream.read())


# Object stores make an object visible only once its upload completes, and a
# rename there is a copy and a delete.
OBJECT_STORES = ("gs", "s3")
TEMPORARY = ".tmp-"  # what every temporary name holds: {path}.tmp-{random}


@contextlib.contextmanager
def create_atomically(path: str) -> Iterator[BinaryIO]:
    """A stream for ``path`` whose bytes appear there only when the block
    completes: readers see the old file or the whole new one, never a part.

    Every build writer goes through here (shards, markers, the manifest,
    ``stats.json``, embeddings, ``failures.parquet``). On a file system the
    bytes go to a unique temporary name beside ``path`` that is renamed into
    place (and removed if the block fails); on an object store they are
    gathered first (spilling to local disk) and uploaded as one whole object.
    """
    if scheme(path) in OBJECT_STORES:
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as gathered:
            yield gathered  # type: ignore[misc]
            gathered.seek(0)
            with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
                shutil.copyfileobj(gathered, out, 1 << 20)
        return
    temporary = f"{path}{TEMPORARY}{uuid.uuid4().hex}"
    try:
        with FileSystems.create(
            temporary, compression_type=CompressionTypes.UNCOMPRESSED
        ) as stream:
            yield stream
    except BaseException:
        if FileSystems.exists(temporary):
            FileSystems.delete([temporary])
        raise
    FileSystems.rename([temporary], [path])  # replaces the old file, if any


def write_atomically(path: str, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all (:func:`create_atomically`)."""
    with create_atomically(path) as stream:
        stream.write(data)


def write_json(path: str, value: Any) -> None:
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True).encode("utf-8") + b"\n")


def read_failure_urls(path: str, reasons: Iterable[str] = ()) -> frozenset[str]:
    """The URLs of the ``failures.parquet`` at ``path`` (local or any Beam
    filesystem), optionally only those that failed for one of ``reasons``."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return failure_urls(stream, reasons)


def delete_folders(parent: str, prefix: str) -> int:
    """Delete the folders in ``parent`` whose names start with ``prefix``, with
    everything in them (on an object store: every object under those names);
    how many were found."""
    if scheme(parent) in ("", "file"):
        local = parent[len("file://") :] if parent.startswith("file://") else parent
        folders = glob.glob(os.path.join(glob.escape(local), glob.escape(prefix) + "*"))
        folders = [f for f in folders if os.path.isdir(f) and not os.path.islink(f)]
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        return len(folders)
    try:
        found = FileSystems.match([FileSystems.join(parent, prefix + "*/**")])[0].metadata_list
    except Exception:  # nothing there, on some stores
        return 0
    paths = [m.path for m in found]
    if paths:
        FileSystems.delete(paths)
    folders = {p[len(parent.rstrip("/")) + 1 :].split("/", 1)[0] for p in paths}
    return len(folders)


def delete_matching(pattern: str) -> int:
    paths = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    if paths:
        FileSystems.delete(paths)
    return len(paths)
