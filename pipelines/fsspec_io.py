"""Paths that Beam's FileSystems do not know, through fsspec: ``hf://``.

Beam picks a filesystem by URL scheme among the subclasses of its
``FileSystem`` that are imported; importing this module makes ``hf://``
(Hugging Face hub datasets, e.g.
``hf://datasets/kakaobrain/coyo-700m/data/part-00000-*.parquet``) readable by
``FileSystems.match``/``open``, so inputs there work like ``gs://`` ones. The
adapter is generic: a subclass names an fsspec protocol.
"""

from __future__ import annotations

import re
from typing import Any

from apache_beam.io.filesystem import (
    CompressedFile,
    CompressionTypes,
    FileMetadata,
    FileSystem,
    MatchResult,
)

_GLOB = re.compile(r"[*?\[]")


class FsspecFileSystem(FileSystem):
    """A Beam FileSystem over the fsspec filesystem of ``PROTOCOL``."""

    PROTOCOL: str | None = None

    def __init__(self, pipeline_options: Any = None):
        super().__init__(pipeline_options)
        self._fs = None

    @classmethod
    def scheme(cls):
        # The base class must not claim local paths (scheme None); "_" is never a URL scheme.
        return cls.PROTOCOL or "_fsspec"

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            self._fs = fsspec.filesystem(self.PROTOCOL)
        return self._fs

    def _url(self, path: str) -> str:
        prefix = f"{self.PROTOCOL}://"
        return path if path.startswith(prefix) else prefix + path.lstrip("/")

    def _strip(self, path: str) -> str:
        prefix = f"{self.PROTOCOL}://"
        return path[len(prefix):] if path.startswith(prefix) else path

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def has_dirs(self) -> bool:
        return True

    def mkdirs(self, path: str) -> None:
        self.fs.makedirs(self._strip(path), exist_ok=True)

    def _metadata(self, info: dict) -> FileMetadata:
        mtime = info.get("mtime") or info.get("last_modified") or 0
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        return FileMetadata(self._url(info["name"]), int(info.get("size") or 0), float(mtime or 0))

    def _list(self, dir_or_prefix: str):
        for info in self.fs.find(self._strip(dir_or_prefix), detail=True).values():
            if info.get("type") != "directory":
                yield self._metadata(info)

    def match(self, patterns, limits=None):
        limits = limits or [None] * len(patterns)
        results = []
        for pattern, limit in zip(patterns, limits):
            path = self._strip(pattern)
            if _GLOB.search(path):
                infos = self.fs.glob(path, detail=True).values()
            elif self.fs.isdir(path):
                infos = self.fs.find(path, detail=True).values()
            elif self.fs.exists(path):
                infos = [self.fs.info(path)]
            else:
                infos = []
            found = [self._metadata(i) for i in infos if i.get("type") != "directory"]
            results.append(MatchResult(pattern, found[:limit] if limit is not None else found))
        return results

    def _open(self, path: str, mode: str, compression_type: str):
        compression_type = FileSystem._get_compression_type(path, compression_type)
        raw = self.fs.open(self._strip(path), mode)
        if compression_type == CompressionTypes.UNCOMPRESSED:
            return raw
        return CompressedFile(raw, compression_type=compression_type)

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return self._open(path, "wb", compression_type)

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return self._open(path, "rb", compression_type)

    def copy(self, source_file_names, destination_file_names):
        for source, destination in zip(source_file_names, destination_file_names):
            self.fs.copy(self._strip(source), self._strip(destination))

    def rename(self, source_file_names, destination_file_names):
        for source, destination in zip(source_file_names, destination_file_names):
            self.fs.mv(self._strip(source), self._strip(destination))

    def exists(self, path: str) -> bool:
        return self.fs.exists(self._strip(path))

    def size(self, path: str) -> int:
        return int(self.fs.size(self._strip(path)))

    def last_updated(self, path: str) -> float:
        return self._metadata(self.fs.info(self._strip(path))).last_updated_in_seconds

    def checksum(self, path: str) -> str:
        info = self.fs.info(self._strip(path))
        return str(info.get("etag") or info.get("sha256") or info.get("size"))

    def metadata(self, path: str) -> FileMetadata:
        return self._metadata(self.fs.info(self._strip(path)))

    def delete(self, paths) -> None:
        for path in paths:
            self.fs.rm(self._strip(path), recursive=True)


class HuggingFaceFileSystem(FsspecFileSystem):
    """``hf://datasets/OWNER/NAME/PATH`` through huggingface_hub's fsspec filesystem."""

    PROTOCOL = "hf"
