"""Where inputs and outputs live: local disk, ``gs://`` and ``s3://`` through
Beam's FileSystems; ``hf://`` (and any other fsspec protocol Beam does not
know) through fsspec, for inputs only.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, BinaryIO, Iterable

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


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it into
    place: readers see the old file or the whole new one, never a part."""
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        stream.write(data)
    FileSystems.rename([temporary], [path])  # replaces: os.rename locally, copy-over on buckets


def write_json(path: str, value: Any) -> None:
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True).encode("utf-8") + b"\n")


def read_failure_urls(path: str, reasons: Iterable[str] = ()) -> frozenset[str]:
    """The URLs of the ``failures.parquet`` at ``path`` (local or any Beam
    filesystem), optionally only those that failed for one of ``reasons``."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return failure_urls(stream, reasons)


def delete_matching(pattern: str) -> int:
    paths = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    if paths:
        FileSystems.delete(paths)
    return len(paths)
